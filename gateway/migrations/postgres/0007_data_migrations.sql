-- Changes to stored data that SQL alone cannot make (they run in the gateway at start),
-- each recorded once by name so that replicas starting together run it once.
CREATE TABLE data_migrations (
    name       TEXT PRIMARY KEY,
    applied_at BIGINT NOT NULL
);
