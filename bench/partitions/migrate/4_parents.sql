-- Step 4: the partitioned tables, empty, with the legacy tables' indexes (same columns
-- and predicates, so ATTACH adopts the legacy ones instead of building them) and keys
-- that hold part (UNIQUE, not PRIMARY KEY: the legacy tables keep theirs on id, and a
-- table has one). Nothing reads them yet: no lock on the live tables but a moment's one
-- for LIKE.
\set ON_ERROR_STOP on
\timing on
SET search_path = :s;
CREATE TABLE runs_p (LIKE runs INCLUDING DEFAULTS, UNIQUE (id, part),
    CONSTRAINT runs_part_key CHECK (part = run_part(id))) PARTITION BY RANGE (part);
CREATE INDEX ON runs_p (namespace, workflow, version, available_at)
    WHERE available_at IS NOT NULL AND queue IS NULL;
CREATE INDEX ON runs_p (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX ON runs_p (parent_run_id) WHERE parent_run_id IS NOT NULL;
CREATE TABLE step_attempts_p (LIKE step_attempts INCLUDING DEFAULTS, UNIQUE (id, part),
    UNIQUE (run_id, position, attempt, part),
    CONSTRAINT step_attempts_part_key CHECK (part = run_part(run_id))) PARTITION BY RANGE (part);
CREATE INDEX ON step_attempts_p (run_id) WHERE status = 'running';
