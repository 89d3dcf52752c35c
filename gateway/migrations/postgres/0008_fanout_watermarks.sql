-- How far each replica has replayed the fanout intents (peers/replay.rs): a restarted
-- replica resumes after the last intent it applied, not after the newest one, so intents
-- committed while it was down or starting are replayed too.
CREATE TABLE fanout_watermarks (
    replica_id     TEXT PRIMARY KEY,
    last_intent_id BIGINT NOT NULL,
    updated_at     BIGINT NOT NULL
);
