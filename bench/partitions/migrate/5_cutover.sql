-- Step 5, one transaction: the legacy tables become the partitions of all parts before
-- 2000-01-01 ('-infinity': every run started before this), and today's and tomorrow's
-- partitions open, their steps' foreign keys pointing at their own day's runs. Renames
-- take ACCESS EXCLUSIVE on the legacy tables until COMMIT: how long is the figure.
-- Workers' prepared statements are planned again by name: they now read the parents.
\set ON_ERROR_STOP on
\timing on
SET search_path = :s;
BEGIN;
SET LOCAL lock_timeout = '2s';
ALTER TABLE runs RENAME TO runs_legacy;
ALTER TABLE runs_p RENAME TO runs;
ALTER TABLE runs ATTACH PARTITION runs_legacy FOR VALUES FROM (MINVALUE) TO ('2000-01-01');
ALTER TABLE step_attempts RENAME TO step_attempts_legacy;
ALTER TABLE step_attempts_p RENAME TO step_attempts;
ALTER TABLE step_attempts ATTACH PARTITION step_attempts_legacy
    FOR VALUES FROM (MINVALUE) TO ('2000-01-01');
SELECT format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)',
              t || '_' || to_char(d, 'YYYYMMDD'), t, d, d + 1)
FROM unnest(ARRAY['runs', 'step_attempts']) AS t,
     unnest(ARRAY[current_date, current_date + 1]) AS d ORDER BY t \gexec
SELECT format('ALTER TABLE %I ADD FOREIGN KEY (run_id, part) REFERENCES %I (id, part) '
              'ON DELETE CASCADE', 'step_attempts_' || x, 'runs_' || x),
       format('ALTER TABLE %I ADD FOREIGN KEY (parent_run_id, part) REFERENCES %I (id, part) '
              'ON DELETE SET NULL (parent_run_id)', 'runs_' || x, 'runs_' || x)
FROM unnest(ARRAY[current_date, current_date + 1]) AS d, to_char(d, 'YYYYMMDD') AS x \gexec
COMMIT;
