-- durably schema, version 1, for SQLite. `{schema}_` prefixes every table (SQLite has no
-- schemas); times are Unix seconds (REAL) from the engine's clock, JSON is TEXT.
CREATE TABLE {schema}_runs (
    id               TEXT PRIMARY KEY,
    namespace        TEXT NOT NULL,
    workflow         TEXT NOT NULL,
    version          TEXT NOT NULL,
    status           TEXT NOT NULL CHECK (status IN
                       ('pending', 'running', 'waiting', 'completed', 'failed', 'canceled')),
    input            TEXT,
    output           TEXT,
    error            TEXT,
    idempotency_key  TEXT,
    attempts         INTEGER NOT NULL DEFAULT 0,
    max_attempts     INTEGER NOT NULL DEFAULT 1,
    fence            INTEGER NOT NULL DEFAULT 0,
    worker_id        TEXT,
    lease_expires_at REAL,
    available_at     REAL,
    wake_requested   INTEGER NOT NULL DEFAULT 0,
    waiting_for      TEXT,
    wake_at          REAL,
    deadline_at      REAL,
    compensating     INTEGER NOT NULL DEFAULT 0,
    parent_run_id    TEXT REFERENCES {schema}_runs (id) ON DELETE SET NULL,
    trace_context    TEXT,
    claim_token      TEXT,
    created_at       REAL NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0),
    started_at       REAL,
    finished_at      REAL,
    updated_at       REAL NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0)
);
CREATE INDEX {schema}_runs_claim ON {schema}_runs (available_at) WHERE available_at IS NOT NULL;
CREATE UNIQUE INDEX {schema}_runs_idempotency
    ON {schema}_runs (namespace, workflow, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX {schema}_runs_parent ON {schema}_runs (parent_run_id) WHERE parent_run_id IS NOT NULL;
CREATE INDEX {schema}_runs_list ON {schema}_runs (created_at DESC);
CREATE INDEX {schema}_runs_token ON {schema}_runs (claim_token) WHERE claim_token IS NOT NULL;

CREATE TABLE {schema}_step_attempts (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id       TEXT NOT NULL REFERENCES {schema}_runs (id) ON DELETE CASCADE,
    position     INTEGER NOT NULL,
    attempt      INTEGER NOT NULL,
    step         TEXT NOT NULL,
    kind         TEXT NOT NULL,
    status       TEXT NOT NULL,
    final        INTEGER NOT NULL DEFAULT 0,
    compensable  INTEGER NOT NULL DEFAULT 0,
    fence        INTEGER NOT NULL,
    worker_id    TEXT,
    signal       TEXT,
    child_run_id TEXT,
    wake_at      REAL,
    output       TEXT,
    error        TEXT,
    started_at   REAL NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0),
    finished_at  REAL,
    UNIQUE (run_id, position, attempt)
);
CREATE INDEX {schema}_step_attempts_waiting ON {schema}_step_attempts (signal)
    WHERE kind = 'signal-wait' AND status = 'running';
CREATE INDEX {schema}_step_attempts_run ON {schema}_step_attempts (run_id, position);

CREATE TABLE {schema}_signals (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    namespace       TEXT NOT NULL,
    name            TEXT NOT NULL,
    data            TEXT,
    idempotency_key TEXT,
    run_id          TEXT,
    delivered_to    TEXT NOT NULL DEFAULT '[]',
    buffered        INTEGER NOT NULL DEFAULT 0,
    consumed_by     TEXT,
    consumed_at     REAL,
    created_at      REAL NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0)
);
CREATE UNIQUE INDEX {schema}_signals_idempotency
    ON {schema}_signals (namespace, name, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX {schema}_signals_buffered ON {schema}_signals (namespace, name, id)
    WHERE buffered AND consumed_at IS NULL;
