-- Kept for one schema on both stores. PostgreSQL lists a fleet operation's
-- targets in its commit, so it never sets it.
ALTER TABLE operations ADD COLUMN targets_listing BIGINT NOT NULL DEFAULT 0;
