-- A run whose replay does not match its history is `held` (issue 31, SPEC §4.2): not
-- terminal, claimable again once its back-off (`available_at`) passes, like a pending run;
-- `holds` counts its holds in a row, which the back-off grows with (0 once it parks).
-- The new CHECK is added NOT VALID: every row already meets it (it only allows more), and
-- validating would read the whole table under the lock this statement takes.
ALTER TABLE {schema}.runs DROP CONSTRAINT IF EXISTS runs_status_check;
ALTER TABLE {schema}.runs ADD CONSTRAINT runs_status_check CHECK (status IN
    ('pending', 'running', 'waiting', 'held', 'completed', 'failed', 'canceled')) NOT VALID;
ALTER TABLE {schema}.runs ADD COLUMN IF NOT EXISTS holds integer NOT NULL DEFAULT 0;
-- The send of 0017, delivering to a held run's waits too: a recorded wait receives only
-- what is delivered to it, so a signal buffered instead would never reach the run once
-- matching code continues it. The held run itself is not woken: its back-off stands.
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
              AND (r.status IN ('pending', 'running', 'waiting', 'held')) IS TRUE
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
        SET output = CAST(send_signal.data AS json), delivered_at = now(),
            signal_expires_at = now() + send_signal.expires_s * interval '1 second'
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
