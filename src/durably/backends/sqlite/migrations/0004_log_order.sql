-- The run's log: `seq` orders the results a workflow received (replay hands them back in
-- that order). A signal delivered to a waiting run is kept on the wait (`delivered_at`,
-- data in `output`) until the run's own worker records it as the next entry of the log.
-- `parent_close`: what happens to a child when its parent ends first.
ALTER TABLE {schema}_step_attempts ADD COLUMN seq INTEGER;
ALTER TABLE {schema}_step_attempts ADD COLUMN delivered_at REAL;
ALTER TABLE {schema}_runs ADD COLUMN parent_close TEXT NOT NULL DEFAULT 'cancel';
UPDATE {schema}_step_attempts SET seq = (
    SELECT o.n FROM (SELECT id, row_number() OVER (PARTITION BY run_id ORDER BY finished_at, id) AS n
                     FROM {schema}_step_attempts
                     WHERE position >= 0 AND (status = 'completed' OR (status = 'failed' AND final))) o
    WHERE o.id = {schema}_step_attempts.id);
