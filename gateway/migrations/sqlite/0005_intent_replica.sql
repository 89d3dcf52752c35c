-- Which replica committed the change: the other replicas replay it
-- (peers/intents.rs); that one marked its own sessions when it published.
-- Intents are removed after a while, oldest first.
ALTER TABLE fanout_intents ADD COLUMN replica_id TEXT NOT NULL DEFAULT '';
CREATE INDEX fanout_intents_created ON fanout_intents (created_at);
