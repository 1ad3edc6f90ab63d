-- A worker claims only the runs of its app's namespace: see the PostgreSQL twin.
DROP INDEX IF EXISTS {schema}_runs_due;
CREATE INDEX {schema}_runs_due ON {schema}_runs (namespace, workflow, version, available_at)
    WHERE available_at IS NOT NULL AND queue IS NULL;
DROP INDEX IF EXISTS {schema}_runs_queued;
CREATE INDEX {schema}_runs_queued ON {schema}_runs
    (namespace, workflow, version, queue, priority DESC, available_at)
    WHERE available_at IS NOT NULL AND queue IS NOT NULL;
