-- Step attempts no longer reference their run by a foreign key. Every statement that writes
-- one locks its run's row first (FOR KEY SHARE or stronger, under the lease), which is all
-- the key's check did, a second time, for each attempt inserted. Measured with bench.cpu,
-- 3-step runs alternated with and without the key: PostgreSQL's CPU per run 0.28 -> 0.25 ms.
ALTER TABLE {schema}.step_attempts DROP CONSTRAINT IF EXISTS step_attempts_run_id_fkey;

-- A run's attempts still go with it, as ON DELETE CASCADE took them: by a trigger of each
-- DELETE of runs, once per statement (a purge's batch: one delete of their attempts), not
-- by the purge's own statement. A worker of the previous release purges runs alone and
-- counts on the cascade (review), as does an operator's DELETE; an attempt left behind
-- would never be deleted, and a run made again with its id (a child's id is a function of
-- its parent's) would replay it as its own history. The attempts are looked up by id from
-- an array (see queries.sql's head): the transition table has no statistics to plan by.
CREATE OR REPLACE FUNCTION {schema}.runs_deleted() RETURNS trigger
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    DELETE FROM {schema}.step_attempts WHERE run_id = ANY(ARRAY(SELECT id FROM gone));
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS runs_deleted ON {schema}.runs;
CREATE TRIGGER runs_deleted AFTER DELETE ON {schema}.runs REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.runs_deleted();
