-- Queues outlive a deploy that renames or removes them: see the PostgreSQL twin.
ALTER TABLE {schema}_queues ADD COLUMN declared_until REAL;
UPDATE {schema}_queues SET declared_until = now() + 600;
INSERT INTO {schema}_queues (name, updated_at)
SELECT DISTINCT queue, now() FROM {schema}_runs WHERE queue IS NOT NULL
ON CONFLICT (name) DO NOTHING;
DROP INDEX IF EXISTS {schema}_runs_queued;
CREATE INDEX {schema}_runs_queued ON {schema}_runs
    (workflow, version, queue, priority DESC, available_at)
    WHERE available_at IS NOT NULL AND queue IS NOT NULL;
CREATE INDEX {schema}_runs_queue_compensating ON {schema}_runs (queue, concurrency_key)
    WHERE queue IS NOT NULL AND compensating;
