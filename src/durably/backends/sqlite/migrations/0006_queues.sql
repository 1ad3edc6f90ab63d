-- Flow control and schedules (see the PostgreSQL twin). The IMMEDIATE transaction of a
-- claim serialises queued claims: no lock of the queue's row is needed.
ALTER TABLE {schema}_runs ADD COLUMN queue TEXT;
ALTER TABLE {schema}_runs ADD COLUMN concurrency_key TEXT;
ALTER TABLE {schema}_runs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
DROP INDEX IF EXISTS {schema}_runs_due;
CREATE INDEX {schema}_runs_due ON {schema}_runs (workflow, version, available_at)
    WHERE available_at IS NOT NULL AND queue IS NULL;
CREATE INDEX {schema}_runs_queued ON {schema}_runs (workflow, version, priority DESC, available_at)
    WHERE available_at IS NOT NULL AND queue IS NOT NULL;
CREATE INDEX {schema}_runs_queue ON {schema}_runs (queue, status, concurrency_key)
    WHERE queue IS NOT NULL;
CREATE INDEX {schema}_runs_queue_started ON {schema}_runs (queue, started_at)
    WHERE queue IS NOT NULL AND started_at IS NOT NULL;
CREATE TABLE {schema}_queues (
    name          TEXT PRIMARY KEY,
    concurrency   INTEGER,
    per_key       INTEGER,
    rate_limit    INTEGER,
    rate_period_s REAL,
    priority      INTEGER NOT NULL DEFAULT 0,
    updated_at    REAL
);
CREATE TABLE {schema}_schedules (
    namespace  TEXT NOT NULL,
    workflow   TEXT NOT NULL,
    schedule   TEXT NOT NULL,
    tz         TEXT NOT NULL,
    last_tick  REAL,
    updated_at REAL,
    PRIMARY KEY (namespace, workflow)
);
