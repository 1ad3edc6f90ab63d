-- durably schema, version 1. `{schema}` is the validated schema identifier.
CREATE TABLE {schema}.runs (
    id               text PRIMARY KEY,
    namespace        text NOT NULL,
    workflow         text NOT NULL,
    version          text NOT NULL,
    status           text NOT NULL CHECK (status IN
                       ('pending', 'running', 'waiting', 'completed', 'failed', 'canceled')),
    input            jsonb,
    output           jsonb,
    error            jsonb,
    idempotency_key  text,
    attempts         integer NOT NULL DEFAULT 0,
    max_attempts     integer NOT NULL DEFAULT 1,
    fence            bigint NOT NULL DEFAULT 0,
    worker_id        text,
    lease_expires_at timestamptz,
    -- When a worker may claim the run: the due time of a pending or waiting run, the lease
    -- expiry of a running one, NULL once nothing is left to do. One partial index on it is
    -- the whole claim path.
    available_at     timestamptz,
    wake_requested   boolean NOT NULL DEFAULT false,
    waiting_for      text,
    wake_at          timestamptz,
    deadline_at      timestamptz,
    compensating     boolean NOT NULL DEFAULT false,
    parent_run_id    text REFERENCES {schema}.runs (id) ON DELETE SET NULL,
    trace_context    jsonb,
    created_at       timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz,
    finished_at      timestamptz,
    updated_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX runs_claim ON {schema}.runs (available_at) WHERE available_at IS NOT NULL;
CREATE UNIQUE INDEX runs_idempotency ON {schema}.runs (namespace, workflow, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX runs_parent ON {schema}.runs (parent_run_id) WHERE parent_run_id IS NOT NULL;
CREATE INDEX runs_list ON {schema}.runs (created_at DESC);
CREATE INDEX runs_status ON {schema}.runs (status, workflow);

CREATE TABLE {schema}.step_attempts (
    id           bigserial PRIMARY KEY,
    run_id       text NOT NULL REFERENCES {schema}.runs (id) ON DELETE CASCADE,
    -- Call order in the workflow; a compensation of the step at position p is at -(p + 1).
    position     integer NOT NULL,
    attempt      integer NOT NULL,
    step         text NOT NULL,
    kind         text NOT NULL CHECK (kind IN
                   ('function', 'transaction', 'sleep', 'signal-wait', 'signal-send', 'child')),
    status       text NOT NULL CHECK (status IN
                   ('running', 'completed', 'failed', 'canceled', 'abandoned')),
    final        boolean NOT NULL DEFAULT false,
    compensable  boolean NOT NULL DEFAULT false,
    fence        bigint NOT NULL,
    worker_id    text,
    signal       text,
    child_run_id text,
    wake_at      timestamptz,
    output       jsonb,
    error        jsonb,
    started_at   timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz,
    UNIQUE (run_id, position, attempt)
);
CREATE INDEX step_attempts_waiting ON {schema}.step_attempts (signal)
    WHERE kind = 'signal-wait' AND status = 'running';
CREATE INDEX step_attempts_running ON {schema}.step_attempts (run_id) WHERE status = 'running';

CREATE TABLE {schema}.signals (
    id              bigserial PRIMARY KEY,
    namespace       text NOT NULL,
    name            text NOT NULL,
    data            jsonb,
    idempotency_key text,
    run_id          text,
    delivered_to    jsonb NOT NULL DEFAULT '[]',
    buffered        boolean NOT NULL DEFAULT false,
    consumed_by     text,
    consumed_at     timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX signals_idempotency ON {schema}.signals (namespace, name, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX signals_buffered ON {schema}.signals (namespace, name, id)
    WHERE buffered AND consumed_at IS NULL;
