-- Continue-as-new (SPEC §4.23): a run that continued ends `continued` (terminal for the
-- run, not for its chain: its output, `continued_as`, names the next run), and
-- the next run says which it continues (`continued_from`). The CHECK is added NOT VALID,
-- as 0019's: it only allows more, and validating would read the whole table under lock.
ALTER TABLE {schema}.runs DROP CONSTRAINT IF EXISTS runs_status_check;
ALTER TABLE {schema}.runs ADD CONSTRAINT runs_status_check CHECK (status IN
    ('pending', 'running', 'waiting', 'held', 'continued', 'completed', 'failed', 'canceled'))
    NOT VALID;
ALTER TABLE {schema}.runs ADD COLUMN IF NOT EXISTS continued_from text;
-- The first run of the chain (NULL on it): a start with the chain's idempotency key, which
-- the newest run holds, is compared with the input the chain was started with.
ALTER TABLE {schema}.runs ADD COLUMN IF NOT EXISTS chain_root text;

-- The SQL API of 0021 (SPEC §4.25), kept to the client's rules for chains: `start_run`
-- with a chain's idempotency key (its newest run holds it) compares the input the chain
-- was first started with; `send_signal` to a run that continued reaches its chain's live
-- run. Otherwise as in 0021.
CREATE OR REPLACE FUNCTION {schema}.start_run(
    workflow text, version text, input jsonb, idempotency_key text DEFAULT NULL,
    queue text DEFAULT NULL, available_at timestamptz DEFAULT NULL,
    deadline_at timestamptz DEFAULT NULL, concurrency_key text DEFAULT NULL,
    priority integer DEFAULT 0, namespace text DEFAULT 'default'
) RETURNS text
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    given text := COALESCE(CAST(start_run.input AS text), 'null');
    bound text := COALESCE(start_run.version, '');
    started text;
    existing record;
BEGIN
    IF start_run.workflow IS NULL OR start_run.workflow = '' THEN
        RAISE EXCEPTION 'a workflow name must be a non-empty string, not %',
            quote_nullable(start_run.workflow) USING ERRCODE = '22023';
    ELSIF start_run.namespace IS NULL OR start_run.namespace = '' THEN
        RAISE EXCEPTION 'a namespace must be a non-empty string, not %',
            quote_nullable(start_run.namespace) USING ERRCODE = '22023';
    ELSIF start_run.queue = '' THEN
        RAISE EXCEPTION 'a queue name must be a non-empty string (or NULL: no queue)'
            USING ERRCODE = '22023';
    ELSIF start_run.queue IS NOT NULL AND bound = '' THEN
        RAISE EXCEPTION 'a run of workflow % started without a version cannot be queued',
            quote_literal(start_run.workflow) USING ERRCODE = '22023',
            HINT = 'give the version of the workflow that declares queue '
                   || quote_literal(start_run.queue);
    END IF;
    PERFORM {schema}.check_readable(start_run.input, given,
                                    'input of workflow ' || quote_literal(start_run.workflow));
    LOOP
        SELECT r.id INTO started FROM {schema}.insert_run(
            replace(CAST(gen_random_uuid() AS text), '-', ''), start_run.namespace,
            start_run.workflow, bound, given, start_run.idempotency_key, 0,
            start_run.available_at, start_run.deadline_at, NULL, NULL, 'cancel',
            start_run.queue, start_run.concurrency_key, COALESCE(start_run.priority, 0),
            'durably_' || (parse_ident('{schema}'))[1]
        ) AS r;
        IF started IS NOT NULL THEN
            RETURN started;
        ELSIF start_run.idempotency_key IS NOT NULL THEN
            -- A new snapshot (VOLATILE): it sees the run of a start this insert waited for.
            -- A chain's key is its newest run's; its input, the first run's (0024).
            SELECT r.id, COALESCE((SELECT o.input FROM {schema}.runs o
                                   WHERE o.id = r.chain_root), r.input) AS input
            INTO existing FROM {schema}.runs r
            WHERE r.namespace = start_run.namespace AND r.workflow = start_run.workflow
              AND r.idempotency_key = start_run.idempotency_key;
            IF FOUND THEN
                IF NOT {schema}.same_json(existing.input, CAST(given AS json)) THEN
                    RAISE EXCEPTION 'idempotency key % already started run % of % with a '
                        'different input; use another key',
                        quote_literal(start_run.idempotency_key), existing.id,
                        quote_literal(start_run.workflow)
                        USING ERRCODE = '23505', CONSTRAINT = 'runs_idempotency',
                              TABLE = 'runs', SCHEMA = (parse_ident('{schema}'))[1];
                END IF;
                RETURN existing.id;
            END IF;
        END IF;
        -- Taken and gone since (a purge), or an id drawn twice: drawn again.
    END LOOP;
END
$$;

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
