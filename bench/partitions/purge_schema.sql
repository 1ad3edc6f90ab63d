-- Partitioned runs and step_attempts for the purge experiment, in schema :s: the day
-- before yesterday holds :n finished runs of 3 steps each; today holds 100 due runs.
-- The foreign keys of the proposed schema are all there: steps to their run (CASCADE, as
-- today), and a child to its parent in the same partition (SET NULL of parent_run_id only).
-- psql -v s=pp -v n=1000000 -f purge_schema.sql
\set ON_ERROR_STOP on
DROP SCHEMA IF EXISTS :s CASCADE;
CREATE SCHEMA :s;
SET search_path = :s;
\i part.sql
CREATE TABLE runs (
    id text NOT NULL, part date NOT NULL, namespace text NOT NULL, workflow text NOT NULL,
    version text NOT NULL, status text NOT NULL, input json, output json,
    fence bigint NOT NULL DEFAULT 0, available_at timestamptz, queue text,
    parent_run_id text, created_at timestamptz NOT NULL DEFAULT now(), finished_at timestamptz,
    PRIMARY KEY (id, part),
    FOREIGN KEY (parent_run_id, part) REFERENCES runs (id, part) ON DELETE SET NULL (parent_run_id)
) PARTITION BY RANGE (part);
CREATE INDEX runs_due_in_namespace ON runs (namespace, workflow, version, available_at)
    WHERE available_at IS NOT NULL AND queue IS NULL;
CREATE INDEX runs_finished ON runs (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX runs_parent ON runs (parent_run_id) WHERE parent_run_id IS NOT NULL;
CREATE TABLE step_attempts (
    id bigserial, part date NOT NULL, run_id text NOT NULL, position integer NOT NULL,
    attempt integer NOT NULL, step text NOT NULL, status text NOT NULL, fence bigint NOT NULL,
    output json, started_at timestamptz NOT NULL DEFAULT now(), finished_at timestamptz,
    PRIMARY KEY (id, part), UNIQUE (run_id, position, attempt, part),
    FOREIGN KEY (run_id, part) REFERENCES runs (id, part) ON DELETE CASCADE
) PARTITION BY RANGE (part);
CREATE INDEX step_attempts_running ON step_attempts (run_id) WHERE status = 'running';
SELECT format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)',
              t || '_' || to_char(d, 'YYYYMMDD'), t, d, d + 1)
FROM unnest(ARRAY['runs', 'step_attempts']) AS t,
     unnest(ARRAY[current_date - 2, current_date - 1, current_date]) AS d \gexec
SELECT current_date - 2 AS old \gset
INSERT INTO runs (id, part, namespace, workflow, version, status, input, output, fence,
                  created_at, finished_at)
SELECT new_run_id(md5(CAST(g AS text)), :'old'), :'old', 'default', 'bench', 'v1',
       'completed', '{"n": 1}', '{"ok": true}', 1, :'old', CAST(:'old' AS date) + interval '1 hour'
FROM generate_series(1, :n) g;
INSERT INTO step_attempts (part, run_id, position, attempt, step, status, fence, output,
                           started_at, finished_at)
SELECT :'old', new_run_id(md5(CAST(g AS text)), :'old'), p, 1, 'step' || p, 'completed', 1,
       '{"ok": true}', :'old', :'old'
FROM generate_series(1, :n) g, generate_series(1, 3) p;
INSERT INTO runs (id, part, namespace, workflow, version, status, available_at)
SELECT new_run_id(md5('due' || g), current_date), current_date, 'default', 'bench', 'v1',
       'pending', now() - interval '1 minute'
FROM generate_series(1, 100) g;
VACUUM ANALYZE runs, step_attempts;
