-- The SQL API's send_signal (0024's, re-created whole: a function's body is one unit)
-- refuses the names requests are sent as, `durably:request:<name>`, as app.send_signal
-- does: from SQL such a signal reached wait_for_request as a request nobody could answer.
CREATE OR REPLACE FUNCTION {schema}.send_signal(
    name text, data jsonb, idempotency_key text DEFAULT NULL, run_id text DEFAULT NULL,
    namespace text DEFAULT 'default', expires interval DEFAULT NULL
) RETURNS jsonb
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    sent record;
    state text;
    target text;
    next_id text;
BEGIN
    IF send_signal.name IS NULL OR send_signal.name ~ '^[[:space:]]*$' THEN
        RAISE EXCEPTION 'a signal needs a name that is not blank, not %',
            quote_nullable(send_signal.name) USING ERRCODE = '22023';
    ELSIF starts_with(send_signal.name, 'durably:request:') THEN
        -- How requests are sent (SPEC §4.22): refused as the Python client refuses it.
        RAISE EXCEPTION 'signal names starting ''durably:request:'' are reserved for requests, not %',
            quote_literal(send_signal.name) USING ERRCODE = '22023';
    ELSIF send_signal.namespace IS NULL OR send_signal.namespace = '' THEN
        RAISE EXCEPTION 'a namespace must be a non-empty string, not %',
            quote_nullable(send_signal.namespace) USING ERRCODE = '22023';
    END IF;
    PERFORM {schema}.check_readable(send_signal.data, CAST(send_signal.data AS text),
                                    'the data of signal ' || quote_literal(send_signal.name));
    IF send_signal.idempotency_key IS NOT NULL OR send_signal.run_id IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock(hashtext(send_signal.namespace || '/' || send_signal.name));
    END IF;
    IF send_signal.idempotency_key IS NOT NULL THEN
        SELECT s.delivered_to, s.buffered INTO sent FROM {schema}.signals s
        WHERE s.namespace = send_signal.namespace AND s.name = send_signal.name
          AND s.idempotency_key = send_signal.idempotency_key;
        IF FOUND THEN
            RETURN jsonb_build_object('delivered_to', sent.delivered_to,
                                      'buffered', sent.buffered, 'duplicate', true);
        END IF;
    END IF;
    target := send_signal.run_id;
    IF target IS NOT NULL THEN
        -- Locked as the send will update it (see `Sends._live_run`); a run that continued
        -- as new is followed along its chain, each run locked in turn, oldest first.
        LOOP
            SELECT r.status, r.output ->> 'continued_as' INTO state, next_id
            FROM {schema}.runs r WHERE r.id = target FOR NO KEY UPDATE;
            EXIT WHEN NOT FOUND OR state <> 'continued';
            target := next_id;
        END LOOP;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'no run with id %', quote_literal(target)
                USING ERRCODE = 'P0002';
        ELSIF state IN ('completed', 'failed', 'canceled') THEN
            RAISE EXCEPTION 'cannot signal run %: it is already %', target, state
                USING ERRCODE = '55000';
        END IF;
    END IF;
    SELECT s.delivered_to, s.buffered INTO sent FROM {schema}.send_signal(
        send_signal.namespace, send_signal.name,
        COALESCE(CAST(send_signal.data AS text), 'null'), send_signal.idempotency_key,
        target, CAST(extract(epoch FROM send_signal.expires) AS float8),
        'durably_' || (parse_ident('{schema}'))[1]
    ) AS s;
    RETURN jsonb_build_object('delivered_to', sent.delivered_to, 'buffered', sent.buffered,
                              'duplicate', false);
END
$$;
