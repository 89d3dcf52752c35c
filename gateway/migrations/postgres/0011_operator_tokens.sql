-- Operator tokens created through the API (the configured ones stay in the gateway
-- configuration). Only the SHA-256 of a secret is kept: secrets are 256-bit random, so
-- a fast hash leaves nothing to guess, and a call is found by the hash it presents.
CREATE TABLE operator_tokens (
    name        TEXT PRIMARY KEY,
    secret_hash TEXT NOT NULL,
    role        TEXT NOT NULL,
    workspace   TEXT,
    created_by  TEXT NOT NULL,
    created_at  BIGINT NOT NULL
);
CREATE UNIQUE INDEX operator_tokens_secret_hash ON operator_tokens (secret_hash);
