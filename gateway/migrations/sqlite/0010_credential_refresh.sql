-- Expiry per credential value, in ms since the epoch, by variable name (a JSON object).
-- A value without an entry expires with its provider (`expires_at`), if at all.
ALTER TABLE providers ADD COLUMN value_expires_json TEXT NOT NULL DEFAULT '{}';
