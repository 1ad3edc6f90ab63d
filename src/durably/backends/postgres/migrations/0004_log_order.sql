-- The run's log: `seq` orders the results a workflow received (replay hands them back in
-- that order). A signal delivered to a waiting run is kept on the wait (`delivered_at`,
-- data in `output`) until the run's own worker records it as the next entry of the log.
-- `parent_close`: what happens to a child when its parent ends first.
ALTER TABLE {schema}.step_attempts ADD COLUMN seq integer;
ALTER TABLE {schema}.step_attempts ADD COLUMN delivered_at timestamptz;
ALTER TABLE {schema}.step_attempts DROP CONSTRAINT IF EXISTS step_attempts_kind_check;
ALTER TABLE {schema}.runs ADD COLUMN parent_close text NOT NULL DEFAULT 'cancel';
UPDATE {schema}.step_attempts s SET seq = o.n
FROM (SELECT id, row_number() OVER (PARTITION BY run_id ORDER BY finished_at, id) AS n
      FROM {schema}.step_attempts
      WHERE position >= 0 AND (status = 'completed' OR (status = 'failed' AND final))) o
WHERE s.id = o.id;
