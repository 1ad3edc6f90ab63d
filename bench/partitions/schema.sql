-- A cut-down durably runs table in schema :s, with :parts daily partitions (0: one plain
-- table, as today) and :n finished runs spread evenly over the last :parts days (all on
-- one day when :parts is 0), plus 100 due runs of today for the claim.
-- psql -v s=p30 -v parts=30 -v n=1000000 -f schema.sql
\set ON_ERROR_STOP on
DROP SCHEMA IF EXISTS :s CASCADE;
CREATE SCHEMA :s;
SET search_path = :s;
\i part.sql
SELECT CASE WHEN :parts = 0 THEN '' ELSE 'PARTITION BY RANGE (part)' END AS partition_by \gset
CREATE TABLE runs (
    id               text NOT NULL,
    part             date NOT NULL,
    namespace        text NOT NULL,
    workflow         text NOT NULL,
    version          text NOT NULL,
    status           text NOT NULL,
    input            json,
    output           json,
    idempotency_key  text,
    attempts         integer NOT NULL DEFAULT 0,
    fence            bigint NOT NULL DEFAULT 0,
    worker_id        text,
    lease_expires_at timestamptz,
    available_at     timestamptz,
    queue            text,
    compensating     boolean NOT NULL DEFAULT false,
    parent_run_id    text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    finished_at      timestamptz,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (id, part)
) :partition_by;
CREATE INDEX runs_due_in_namespace ON runs (namespace, workflow, version, available_at)
    WHERE available_at IS NOT NULL AND queue IS NULL;
CREATE INDEX runs_finished ON runs (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX runs_list ON runs (created_at DESC);
CREATE INDEX runs_status ON runs (status, workflow);
CREATE INDEX runs_parent ON runs (parent_run_id) WHERE parent_run_id IS NOT NULL;
SELECT format('CREATE TABLE runs_%s PARTITION OF runs FOR VALUES FROM (%L) TO (%L)',
              to_char(d, 'YYYYMMDD'), d, d + 1)
FROM generate_series(current_date - (:parts - 1), current_date, interval '1 day') AS t(t),
     LATERAL (SELECT CAST(t AS date) AS d) AS x
WHERE :parts > 0 \gexec
-- bench_id(g) is the id of the g-th run: its day is spread over the partitions.
CREATE FUNCTION bench_day(g integer) RETURNS date IMMUTABLE LANGUAGE sql
    RETURN current_date - (g % greatest(:parts, 1));
CREATE FUNCTION bench_id(g integer) RETURNS text IMMUTABLE LANGUAGE sql
    RETURN new_run_id(md5(CAST(g AS text)), bench_day(g));
INSERT INTO runs (id, part, namespace, workflow, version, status, input, output, attempts,
                  fence, created_at, finished_at, updated_at)
SELECT bench_id(g), bench_day(g), 'default', 'bench', 'v1', 'completed', '{"n": 1}',
       '{"ok": true}', 1, 1, bench_day(g), bench_day(g) + interval '1 hour',
       bench_day(g) + interval '1 hour'
FROM generate_series(1, :n) g;
INSERT INTO runs (id, part, namespace, workflow, version, status, available_at)
SELECT new_run_id(md5('due' || g), current_date), current_date, 'default', 'bench', 'v1',
       'pending', now() - interval '1 minute'
FROM generate_series(1, 100) g;
VACUUM ANALYZE runs;
