-- Step 3: prove the legacy rows fit the legacy partition (part < 2000-01-01) and the key
-- rule (part = run_part(id)), so ATTACH need not scan. NOT VALID takes ACCESS EXCLUSIVE
-- for a moment; VALIDATE scans under SHARE UPDATE EXCLUSIVE, beside the workers.
\set ON_ERROR_STOP on
\timing on
SET search_path = :s;
SET lock_timeout = '2s';
-- (The key rule has the name and expression the parent's will have: ATTACH requires it.)
ALTER TABLE runs ADD CONSTRAINT runs_legacy_part CHECK (part < '2000-01-01') NOT VALID,
    ADD CONSTRAINT runs_part_key CHECK (part = run_part(id)) NOT VALID;
ALTER TABLE step_attempts
    ADD CONSTRAINT step_attempts_legacy_part CHECK (part < '2000-01-01') NOT VALID,
    ADD CONSTRAINT step_attempts_part_key CHECK (part = run_part(run_id)) NOT VALID;
RESET lock_timeout;
ALTER TABLE runs VALIDATE CONSTRAINT runs_legacy_part;
ALTER TABLE runs VALIDATE CONSTRAINT runs_part_key;
ALTER TABLE step_attempts VALIDATE CONSTRAINT step_attempts_legacy_part;
ALTER TABLE step_attempts VALIDATE CONSTRAINT step_attempts_part_key;
