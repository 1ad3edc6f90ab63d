-- The history a claim hands its worker, read with a snapshot of its own (see `claim`): a
-- statement reads other tables as of its start, but locks the runs it claims as they are
-- later. A step record committed in between, by the run's previous holder while its lease
-- still held, was in no history the new execution read: the step ran again. A VOLATILE
-- function takes a new snapshot for each of its statements, here once the run is locked.
-- The previous holder's attempts still `running` are abandoned here too, those it began in
-- between included (the claim's own snapshot would not see them).
CREATE OR REPLACE FUNCTION {schema}.claimed_history(claimed_id text) RETURNS text
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    UPDATE {schema}.step_attempts SET status = 'abandoned', finished_at = now()
    WHERE run_id = claimed_id AND status = 'running' AND kind IN ('function', 'transaction');
    RETURN (SELECT json_agg(h ORDER BY h.position, h.attempt) FROM (
        SELECT s.position, s.attempt, s.step, s.kind, s.status, s.final, s.compensable,
               s.signal, s.child_run_id, s.wake_at, s.output, s.error, s.workflow_attempt,
               s.seq, s.delivered_at IS NOT NULL AS delivered
        FROM {schema}.step_attempts s WHERE s.run_id = claimed_id) h)::text;
END
$$;
