-- Desired state of the OpenShell gateway (SQLite flavour; keep in step with ../postgres).
-- Times are milliseconds since the Unix epoch; booleans are 0/1 integers so
-- both backends share every query.

CREATE TABLE workspaces (
    name              TEXT PRIMARY KEY,
    settings_revision INTEGER NOT NULL DEFAULT 0,
    created_at        INTEGER NOT NULL
);

CREATE TABLE sandboxes (
    id                TEXT PRIMARY KEY,
    name              TEXT NOT NULL,
    workspace         TEXT NOT NULL REFERENCES workspaces(name),
    lifecycle         TEXT NOT NULL,
    credential_hash   TEXT NOT NULL,
    policy_revision   INTEGER NOT NULL DEFAULT 0,
    settings_revision INTEGER NOT NULL DEFAULT 0,
    attachment_epoch  INTEGER NOT NULL DEFAULT 0,
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL
);
CREATE UNIQUE INDEX sandboxes_live_name ON sandboxes (workspace, name) WHERE lifecycle <> 'deleted';

CREATE TABLE policy_revisions (
    sandbox_id   TEXT NOT NULL REFERENCES sandboxes(id),
    revision     INTEGER NOT NULL,
    policy_hash  TEXT NOT NULL,
    policy_json  TEXT NOT NULL,
    operation_id TEXT,
    created_at   INTEGER NOT NULL,
    PRIMARY KEY (sandbox_id, revision)
);

-- policy_json NULL records that the global policy was cleared.
CREATE TABLE global_policy_revisions (
    revision     INTEGER PRIMARY KEY,
    policy_hash  TEXT,
    policy_json  TEXT,
    operation_id TEXT,
    created_at   INTEGER NOT NULL
);

-- Gateway-wide counters: global_settings_revision.
CREATE TABLE counters (
    name  TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
INSERT INTO counters (name, value) VALUES ('global_settings_revision', 0);

-- scope is 'global' (scope_id ''), 'workspace' (name) or 'sandbox' (id).
CREATE TABLE settings (
    scope      TEXT NOT NULL,
    scope_id   TEXT NOT NULL,
    key        TEXT NOT NULL,
    value_json TEXT NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (scope, scope_id, key)
);

CREATE TABLE providers (
    id                TEXT PRIMARY KEY,
    name              TEXT NOT NULL,
    workspace         TEXT NOT NULL REFERENCES workspaces(name),
    provider_type     TEXT NOT NULL,
    env_json          TEXT NOT NULL,
    credential_names  TEXT NOT NULL,
    credentials_box   BLOB NOT NULL,
    revision          INTEGER NOT NULL,
    expires_at        INTEGER,
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL
);
CREATE UNIQUE INDEX providers_name ON providers (workspace, name);

CREATE TABLE attachments (
    sandbox_id  TEXT NOT NULL REFERENCES sandboxes(id),
    provider_id TEXT NOT NULL REFERENCES providers(id),
    attached_at INTEGER NOT NULL,
    PRIMARY KEY (sandbox_id, provider_id)
);
CREATE INDEX attachments_provider ON attachments (provider_id);

CREATE TABLE operations (
    id                     TEXT PRIMARY KEY,
    target_kind            TEXT NOT NULL,
    target                 TEXT NOT NULL,
    sandbox_id             TEXT,
    state                  TEXT NOT NULL,
    outcome                TEXT NOT NULL DEFAULT '',
    error                  TEXT NOT NULL DEFAULT '',
    policy_revision        INTEGER NOT NULL DEFAULT 0,
    settings_revision      INTEGER NOT NULL DEFAULT 0,
    global_policy_revision INTEGER NOT NULL DEFAULT 0,
    no_op                  INTEGER NOT NULL DEFAULT 0,
    touches_policy         INTEGER NOT NULL DEFAULT 0,
    caller                 TEXT NOT NULL,
    idempotency_key        TEXT,
    request_fingerprint    TEXT,
    idempotency_expires_at INTEGER,
    created_at             INTEGER NOT NULL,
    updated_at             INTEGER NOT NULL,
    completed_at           INTEGER
);
CREATE UNIQUE INDEX operations_idempotency ON operations (target_kind, target, caller, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX operations_sandbox_state ON operations (sandbox_id, state);
CREATE INDEX operations_created ON operations (created_at);

-- Per-sandbox progress of fleet operations (workspace, global, provider).
CREATE TABLE operation_targets (
    operation_id TEXT NOT NULL REFERENCES operations(id),
    sandbox_id   TEXT NOT NULL,
    state        TEXT NOT NULL,
    outcome      TEXT NOT NULL DEFAULT '',
    error        TEXT NOT NULL DEFAULT '',
    updated_at   INTEGER NOT NULL,
    PRIMARY KEY (operation_id, sandbox_id)
);
CREATE INDEX operation_targets_sandbox ON operation_targets (sandbox_id, state);

-- Written in the same transaction as the change, so a crash between commit
-- and publication is repaired by replaying intents past a replica's watermark.
CREATE TABLE fanout_intents (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    scope        TEXT NOT NULL,
    scope_id     TEXT NOT NULL,
    components   TEXT NOT NULL,
    operation_id TEXT,
    created_at   INTEGER NOT NULL
);

CREATE TABLE replicas (
    replica_id   TEXT PRIMARY KEY,
    peer_address TEXT NOT NULL,
    started_at   INTEGER NOT NULL,
    heartbeat_at INTEGER NOT NULL,
    watermark    INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE session_owners (
    sandbox_id         TEXT PRIMARY KEY,
    replica_id         TEXT NOT NULL,
    session_id         TEXT NOT NULL,
    epoch              INTEGER NOT NULL,
    supervisor_version TEXT NOT NULL,
    protocol_revision  INTEGER NOT NULL,
    mode               TEXT NOT NULL,
    connected_at       INTEGER NOT NULL,
    heartbeat_at       INTEGER NOT NULL
);

-- What each sandbox's supervisor last reported (poll report or push ack).
CREATE TABLE supervisor_reports (
    sandbox_id     TEXT PRIMARY KEY,
    status         TEXT NOT NULL,
    revisions_json TEXT NOT NULL,
    reason         TEXT NOT NULL,
    reported_at    INTEGER NOT NULL
);
