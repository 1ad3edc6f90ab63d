-- Values are exact (SPEC §4.20): the payloads a workflow or a client reads back as values
-- (a run's input and output, step results and events, signal data) are `json`, which
-- keeps the engine's text as it was written. `jsonb` sorted a dict's keys (shorter first)
-- and made 1e23 an exact integer and -0.0 a 0: a replay received another value than the
-- first execution, and one that iterated a dict took other steps. `json` still has the
-- -> and ->> operators. Values written before keep jsonb's form (nothing can restore it).
-- What the engine compares or indexes stays jsonb (workers.workflows with @>, resumes,
-- delivered_to), and so do errors: they are the engine's own dicts of text, and the
-- previous release's run ends, running beside this one during a deploy, combine them with
-- jsonb (COALESCE(CAST(:error AS jsonb), error)), which no json column could be.
-- Its one statement that picks between a stored step output and a jsonb one
-- (`resolve_wait`) does fail on the new columns: the previous release's workers should be
-- stopped before this migration runs, or their signal waits with a timeout may fail.
-- Each table is rewritten, under its exclusive lock (the migrator waits for it briefly
-- and tries again: never queued behind a long transaction).
ALTER TABLE {schema}.runs
    ALTER COLUMN input TYPE json USING input::json,
    ALTER COLUMN output TYPE json USING output::json;
ALTER TABLE {schema}.step_attempts ALTER COLUMN output TYPE json USING output::json;
ALTER TABLE {schema}.signals ALTER COLUMN data TYPE json USING data::json;
-- The send of 0014, storing the data as it was given.
CREATE OR REPLACE FUNCTION {schema}.send_signal(
    namespace text, name text, data text, idempotency_key text, run_id text,
    expires_s float8, channel text
) RETURNS TABLE (delivered_to jsonb, buffered boolean, notified bigint)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext(send_signal.namespace || '/' || send_signal.name));
    RETURN QUERY WITH targets AS (
        SELECT DISTINCT ON (w.run_id) w.id, w.run_id
        FROM (
            SELECT a.id, a.run_id, a.position FROM {schema}.step_attempts a
            WHERE send_signal.run_id IS NULL AND a.signal = send_signal.name
              AND a.kind = 'signal-wait' AND a.status = 'running' AND a.delivered_at IS NULL
            UNION ALL
            SELECT a.id, a.run_id, a.position FROM {schema}.step_attempts a
            WHERE a.run_id = send_signal.run_id AND a.signal = send_signal.name
              AND a.kind = 'signal-wait' AND a.status = 'running' AND a.delivered_at IS NULL
        ) w CROSS JOIN LATERAL (
            SELECT 1 FROM {schema}.runs r
            WHERE r.id = w.run_id AND r.namespace = send_signal.namespace
              AND (r.status IN ('pending', 'running', 'waiting')) IS TRUE
            OFFSET 0
        ) r
        ORDER BY w.run_id, w.position
    ), locked AS MATERIALIZED (
        SELECT r.id FROM {schema}.runs r
        WHERE r.id = ANY(ARRAY(SELECT t.run_id FROM targets t))
        ORDER BY r.id
        FOR NO KEY UPDATE
    ), waits AS (
        UPDATE {schema}.step_attempts a
        SET output = CAST(send_signal.data AS json), delivered_at = now()
        WHERE a.id = ANY(ARRAY(SELECT t.id FROM targets t))
          AND a.run_id IN (SELECT l.id FROM locked l)
          AND a.status = 'running' AND a.delivered_at IS NULL
        RETURNING a.run_id
    ), woke AS (
        UPDATE {schema}.runs r SET
            wake_requested = (r.status = 'running'),
            status = CASE WHEN r.status = 'waiting' THEN 'pending' ELSE r.status END,
            available_at = CASE WHEN r.status = 'waiting' THEN now() ELSE r.available_at END,
            updated_at = now()
        WHERE r.id = ANY(ARRAY(SELECT w.run_id FROM waits w))
        RETURNING r.id, r.wake_requested
    ), notified AS (
        SELECT pg_notify(send_signal.channel, 'run') FROM (SELECT 1 FROM woke LIMIT 1) AS x
        UNION ALL
        SELECT pg_notify(send_signal.channel, 'wake:' || k.id) FROM woke k
        WHERE k.wake_requested
    ), stored AS (
        INSERT INTO {schema}.signals (namespace, name, data, idempotency_key, run_id,
            delivered_to, buffered, expires_at)
        SELECT send_signal.namespace, send_signal.name, CAST(send_signal.data AS json),
            send_signal.idempotency_key, send_signal.run_id,
            COALESCE((SELECT jsonb_agg(w.run_id ORDER BY w.run_id) FROM waits w), '[]'),
            NOT EXISTS (SELECT 1 FROM waits),
            now() + send_signal.expires_s * interval '1 second'
        RETURNING delivered_to, buffered
    )
    SELECT s.delivered_to, s.buffered, (SELECT count(*) FROM notified) FROM stored s;
END
$$;
