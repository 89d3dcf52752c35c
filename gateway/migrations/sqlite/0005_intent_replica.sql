-- Which replica committed the change: the other replicas replay it
-- (peers/replay.rs); that one marked its own sessions when it published.
ALTER TABLE fanout_intents ADD COLUMN replica_id TEXT NOT NULL DEFAULT '';
