-- Today's shape (0001 and later, cut down): plain runs and step_attempts with their keys
-- (ids are uuid4 hex, version nibble 4, as the engine makes them)
-- and foreign keys, :n finished runs of one step each, 100 due runs.
-- psql -v s=m -v n=1000000 -f migrate/0_legacy.sql
\set ON_ERROR_STOP on
DROP SCHEMA IF EXISTS :s CASCADE;
CREATE SCHEMA :s;
SET search_path = :s;
\i part.sql
CREATE TABLE runs (
    id text PRIMARY KEY, namespace text NOT NULL, workflow text NOT NULL,
    version text NOT NULL, status text NOT NULL, input json, output json,
    idempotency_key text, fence bigint NOT NULL DEFAULT 0, available_at timestamptz,
    queue text, parent_run_id text REFERENCES runs (id) ON DELETE SET NULL,
    created_at timestamptz NOT NULL DEFAULT now(), finished_at timestamptz,
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX runs_due_in_namespace ON runs (namespace, workflow, version, available_at)
    WHERE available_at IS NOT NULL AND queue IS NULL;
CREATE UNIQUE INDEX runs_idempotency ON runs (namespace, workflow, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX runs_finished ON runs (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX runs_parent ON runs (parent_run_id) WHERE parent_run_id IS NOT NULL;
CREATE TABLE step_attempts (
    id bigserial PRIMARY KEY, run_id text NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    position integer NOT NULL, attempt integer NOT NULL, step text NOT NULL,
    status text NOT NULL, fence bigint NOT NULL, output json,
    started_at timestamptz NOT NULL DEFAULT now(), finished_at timestamptz,
    UNIQUE (run_id, position, attempt)
);
CREATE INDEX step_attempts_running ON step_attempts (run_id) WHERE status = 'running';
INSERT INTO runs (id, namespace, workflow, version, status, input, output, idempotency_key,
                  fence, created_at, finished_at)
SELECT overlay(md5(CAST(g AS text)) placing '4' from 13), 'default', 'bench', 'v1',
       'completed', '{"n": 1}', '{"ok": true}',
       CASE WHEN g % 10 = 0 THEN 'k' || g END, 1, now() - interval '2 days',
       now() - interval '2 days'
FROM generate_series(1, :n) g;
INSERT INTO step_attempts (run_id, position, attempt, step, status, fence, output)
SELECT overlay(md5(CAST(g AS text)) placing '4' from 13), 1, 1, 'step1', 'completed', 1,
       '{"ok": true}'
FROM generate_series(1, :n) g;
INSERT INTO runs (id, namespace, workflow, version, status, available_at)
SELECT overlay(md5('due' || g) placing '4' from 13), 'default', 'bench', 'v1', 'pending', now()
FROM generate_series(1, 100) g;
VACUUM ANALYZE runs, step_attempts;
