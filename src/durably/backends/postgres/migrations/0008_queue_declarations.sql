-- Queues outlive a deploy that renames or removes them (SPEC §4.17). A queue is declared
-- while `declared_until` is in the future: every worker that declares it pushes it one
-- lease ahead when it starts, at each heartbeat and at each claim of the queue. A run whose
-- queue is not declared (renamed, removed, or never declared by any worker) is claimed by
-- the unqueued claim instead of waiting forever. A queue gets its row when its first run is
-- started, so that "not declared" is a row to read (and to lock), never a scan of the runs.
ALTER TABLE {schema}.queues ADD COLUMN declared_until timestamptz;
-- Queues declared before this migration stay declared for a while: the workers of the
-- previous release renew nothing, and their queues must not lose their limits meanwhile.
UPDATE {schema}.queues SET declared_until = now() + interval '10 minutes';
INSERT INTO {schema}.queues (name)
SELECT DISTINCT queue FROM {schema}.runs WHERE queue IS NOT NULL
ON CONFLICT (name) DO NOTHING;
-- The due runs of a (workflow, version) in one queue, highest priority then oldest: the
-- queued claim and the unqueued claim's look at a queue no worker declares read one range.
DROP INDEX IF EXISTS {schema}.runs_queued;
CREATE INDEX runs_queued ON {schema}.runs (workflow, version, queue, priority DESC, available_at)
    WHERE available_at IS NOT NULL AND queue IS NOT NULL;
-- Canceled runs running their compensations hold a slot of their queue.
CREATE INDEX runs_queue_compensating ON {schema}.runs (queue, concurrency_key)
    WHERE queue IS NOT NULL AND compensating;
