-- Retention by partition: the steps' partition of the oldest day, then the runs' one.
-- DETACH ... CONCURRENTLY runs outside a transaction block and takes SHARE UPDATE
-- EXCLUSIVE (claims, reads and writes go on); the DROP of a detached table locks only it.
\set ON_ERROR_STOP on
\timing on
SET search_path = :s;
SELECT 'step_attempts_' || to_char(current_date - 2, 'YYYYMMDD') AS steps,
       'runs_' || to_char(current_date - 2, 'YYYYMMDD') AS runs \gset
SELECT count(*) AS runs_in_partition FROM :"runs";
-- (each step's start, in epoch seconds, to set beside latency.sh's slowest claims)
SELECT extract(epoch FROM clock_timestamp()) AS detach_steps;
ALTER TABLE step_attempts DETACH PARTITION :"steps" CONCURRENTLY;
SELECT extract(epoch FROM clock_timestamp()) AS drop_steps;
DROP TABLE :"steps";
SELECT extract(epoch FROM clock_timestamp()) AS detach_runs;
ALTER TABLE runs DETACH PARTITION :"runs" CONCURRENTLY;
SELECT extract(epoch FROM clock_timestamp()) AS drop_runs;
DROP TABLE :"runs";
SELECT extract(epoch FROM clock_timestamp()) AS done;
