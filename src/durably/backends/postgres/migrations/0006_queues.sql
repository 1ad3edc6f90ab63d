-- Flow control and schedules (SPEC §4.17). A queued run names its queue; the queue's
-- limits live in `queues`, written by the workers that declare it, and a queued claim
-- locks the queue's row, counts and claims in one transaction, so that workers claiming
-- at once never exceed a limit. Unqueued runs keep their claim of 0005: runs_due now
-- holds only them, and queued runs are read per (workflow, version) from runs_queued.
ALTER TABLE {schema}.runs ADD COLUMN queue text;
ALTER TABLE {schema}.runs ADD COLUMN concurrency_key text;
ALTER TABLE {schema}.runs ADD COLUMN priority integer NOT NULL DEFAULT 0;
DROP INDEX IF EXISTS {schema}.runs_due;
CREATE INDEX runs_due ON {schema}.runs (workflow, version, available_at)
    WHERE available_at IS NOT NULL AND queue IS NULL;
CREATE INDEX runs_queued ON {schema}.runs (workflow, version, priority DESC, available_at)
    WHERE available_at IS NOT NULL AND queue IS NOT NULL;
-- Running (and waiting) counts per queue and key; first claims in a rate window.
CREATE INDEX runs_queue ON {schema}.runs (queue, status, concurrency_key)
    WHERE queue IS NOT NULL;
CREATE INDEX runs_queue_started ON {schema}.runs (queue, started_at)
    WHERE queue IS NOT NULL AND started_at IS NOT NULL;
CREATE TABLE {schema}.queues (
    name          text PRIMARY KEY,
    concurrency   integer,
    per_key       integer,
    rate_limit    integer,
    rate_period_s double precision,
    priority      boolean NOT NULL DEFAULT false,
    updated_at    timestamptz NOT NULL DEFAULT now()
);
-- The last tick each scheduled workflow was started for (backfill starts after it).
CREATE TABLE {schema}.schedules (
    namespace  text NOT NULL,
    workflow   text NOT NULL,
    schedule   text NOT NULL,
    tz         text NOT NULL,
    last_tick  timestamptz,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, workflow)
);
