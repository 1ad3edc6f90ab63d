-- Requests with answers (SPEC §4.22): see the PostgreSQL twin.
CREATE TABLE {schema}_requests (
    id              TEXT PRIMARY KEY,
    run_id          TEXT NOT NULL REFERENCES {schema}_runs (id) ON DELETE CASCADE,
    name            TEXT NOT NULL,
    idempotency_key TEXT,
    status          TEXT NOT NULL DEFAULT 'pending'
                      CHECK (status IN ('pending', 'answered', 'rejected')),
    answer          TEXT,
    reason          TEXT,
    created_at      REAL NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0),
    answered_at     REAL
);
CREATE UNIQUE INDEX {schema}_requests_idempotency ON {schema}_requests (run_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX {schema}_requests_run ON {schema}_requests (run_id);
