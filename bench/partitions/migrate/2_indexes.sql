-- Step 2: the keys the partitioned tables need on the legacy partition, built beside the
-- workers (SHARE UPDATE EXCLUSIVE: reads and writes go on), so ATTACH finds them.
\set ON_ERROR_STOP on
\timing on
SET search_path = :s;
CREATE UNIQUE INDEX CONCURRENTLY runs_legacy_id_part ON runs (id, part);
CREATE UNIQUE INDEX CONCURRENTLY step_attempts_legacy_id_part ON step_attempts (id, part);
CREATE UNIQUE INDEX CONCURRENTLY step_attempts_legacy_position
    ON step_attempts (run_id, position, attempt, part);
-- ATTACH adopts only a constraint's index for the parent's UNIQUE constraint (a plain
-- unique index would be built again, under the cutover's lock): make them constraints,
-- a moment's ACCESS EXCLUSIVE each.
SET lock_timeout = '2s';
ALTER TABLE runs ADD CONSTRAINT runs_id_part UNIQUE USING INDEX runs_legacy_id_part;
ALTER TABLE step_attempts ADD CONSTRAINT step_attempts_id_part
    UNIQUE USING INDEX step_attempts_legacy_id_part;
ALTER TABLE step_attempts ADD CONSTRAINT step_attempts_position
    UNIQUE USING INDEX step_attempts_legacy_position;
