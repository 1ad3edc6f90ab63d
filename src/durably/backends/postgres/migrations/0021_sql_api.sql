-- Functions for callers in any language (SPEC §4.25): `start_run` and `send_signal`, to
-- call inside any transaction (roll back and nothing was started or sent). They keep the
-- rules of the Python client's `start` and `send_signal`:
-- * `insert_run` is the Python client's `insert_run` query, statement for statement: the
--   run, its queue's row, the NOTIFY that wakes idle workers at once.
-- * `same_json` compares two inputs as the Python client does (`codec.canonical`): key
--   order aside, `1` and `1.0`, `true` and `1`, `0.0` and `-0.0` differ.
-- * the public `send_signal` (named arguments with defaults) looks up the key and the run
--   addressed as `store.sends` does, under the name's lock, then sends through the
--   engine's own `send_signal` (0014), the one the Python client calls.
-- Errors a caller can act on carry a SQLSTATE: 22023 (invalid_parameter_value) for bad
-- arguments, 23505 (unique_violation, constraint runs_idempotency) for a key that started a
-- run with another input, P0002 (no_data_found) for an unknown run, 55000
-- (object_not_in_prerequisite_state) for a finished one. Nothing is written by a call that
-- raises. A later signature change must DROP the function first: CREATE OR REPLACE with
-- another parameter list adds an overload, and calls that fit both become ambiguous.

-- A JSON number as Python's reader takes it: a float (a fraction or an exponent) as
-- float(), which gives ±inf past the range of a double and ±0.0 below it, where
-- PostgreSQL's float8 refuses the text.
CREATE OR REPLACE FUNCTION {schema}.py_float(token text) RETURNS float8
LANGUAGE plpgsql IMMUTABLE STRICT AS $$
BEGIN
    RETURN token::float8;
EXCEPTION WHEN numeric_value_out_of_range THEN
    IF abs(token::numeric) > 1 THEN
        RETURN sign(token::numeric) * 'Infinity'::float8;
    END IF;
    RETURN CASE WHEN left(token, 1) = '-' THEN '-0'::float8 ELSE 0 END;
END
$$;

-- Whether two JSON texts hold values the Python client takes as equal: canonical(decode(a))
-- = canonical(decode(b)). Objects: the same keys (the last of duplicate keys wins, as in
-- Python's reader), each with equal values, in any order; arrays: equal items in order;
-- numbers: both ints (no fraction, no exponent) of equal value, or both floats equal as
-- doubles, a zero's sign included; strings, booleans and null: equal.
CREATE OR REPLACE FUNCTION {schema}.same_json(a json, b json) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE STRICT AS $$
DECLARE
    kind text := json_typeof(a);
    ta text;
    tb text;
    fa float8;
    fb float8;
BEGIN
    IF kind <> json_typeof(b) THEN
        RETURN false;
    ELSIF kind = 'object' THEN
        RETURN NOT EXISTS (
            SELECT 1
            FROM (SELECT DISTINCT ON (e.key) e.key, e.value
                  FROM json_each(a) WITH ORDINALITY AS e(key, value, n)
                  ORDER BY e.key, e.n DESC) x
            FULL JOIN (SELECT DISTINCT ON (e.key) e.key, e.value
                       FROM json_each(b) WITH ORDINALITY AS e(key, value, n)
                       ORDER BY e.key, e.n DESC) y ON x.key = y.key
            WHERE x.key IS NULL OR y.key IS NULL OR NOT {schema}.same_json(x.value, y.value));
    ELSIF kind = 'array' THEN
        RETURN json_array_length(a) = json_array_length(b) AND NOT EXISTS (
            SELECT 1
            FROM json_array_elements(a) WITH ORDINALITY AS x(value, n)
            JOIN json_array_elements(b) WITH ORDINALITY AS y(value, n) ON x.n = y.n
            WHERE NOT {schema}.same_json(x.value, y.value));
    ELSIF kind = 'number' THEN
        ta := btrim(a::text);
        tb := btrim(b::text);
        IF (ta ~ '^-?[0-9]+$') <> (tb ~ '^-?[0-9]+$') THEN
            RETURN false;  -- an int and a float
        ELSIF ta ~ '^-?[0-9]+$' THEN
            RETURN ta::numeric = tb::numeric;
        END IF;
        fa := {schema}.py_float(ta);
        fb := {schema}.py_float(tb);
        RETURN fa = fb AND (fa <> 0 OR (left(ta, 1) = '-') = (left(tb, 1) = '-'));
    END IF;
    RETURN a::jsonb = b::jsonb;
END
$$;

-- What jsonb takes and the engine's readers cannot: an int of more than 4300 digits
-- (`codec.INT_DIGITS`) or a value nested deeper than the 254 levels the Python codec
-- writes. Stored, such a value could be started or sent, never read: a run holding one
-- would fail every claim and every listing of it. `text` is the value's text (only a long
-- one can hold either). Raises 22023 naming `what`.
CREATE OR REPLACE FUNCTION {schema}.check_readable(value jsonb, text text, what text)
RETURNS void LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF octet_length(check_readable.text) >= 510
       AND jsonb_path_exists(check_readable.value, 'lax $.**{{255}}') THEN
        RAISE EXCEPTION '% is nested more than 254 levels deep, deeper than JSON readers '
            'take: flatten it', check_readable.what USING ERRCODE = '22023';
    END IF;
    IF octet_length(check_readable.text) > 4300 AND EXISTS (
        SELECT 1 FROM jsonb_path_query(check_readable.value, 'strict $.**') AS v
        WHERE jsonb_typeof(v) = 'number' AND CAST(v AS text) !~ '[.eE]'
          AND length(ltrim(CAST(v AS text), '-')) > 4300
    ) THEN
        RAISE EXCEPTION '% is not JSON: it holds an integer of more than 4300 digits, and '
            'JSON readers take at most 4300: store it as a string', check_readable.what
            USING ERRCODE = '22023';
    END IF;
END
$$;

-- The Python client's `insert_run` query as a function, for `start_run`: the run, or
-- nothing when its id or idempotency key is taken; its queue's row (see 0008); the NOTIFY
-- that wakes idle workers when it is due. The same statement, parameter for parameter
-- (`:x` there is `insert_run.x` here; tests/integration/sql holds them equal): the Python
-- client does not call this, a function call costs its insert more server time (issue 30).
CREATE OR REPLACE FUNCTION {schema}.insert_run(
    id text, namespace text, workflow text, version text, input text, idempotency_key text,
    max_attempts integer, available_at timestamptz, deadline_at timestamptz,
    parent_run_id text, trace_context text, parent_close text, queue text,
    concurrency_key text, priority integer, channel text
) RETURNS SETOF {schema}.runs
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
WITH ins AS (
    INSERT INTO {schema}.runs (id, namespace, workflow, version, status, input, idempotency_key,
        max_attempts, available_at, deadline_at, parent_run_id, trace_context, parent_close,
        queue, concurrency_key, priority)
    VALUES (insert_run.id, insert_run.namespace, insert_run.workflow, insert_run.version,
        'pending', CAST(insert_run.input AS json),
        insert_run.idempotency_key, insert_run.max_attempts,
        LEAST(COALESCE(CAST(insert_run.available_at AS timestamptz), now()),
            CAST(insert_run.deadline_at AS timestamptz)),
        insert_run.deadline_at, insert_run.parent_run_id,
        CAST(insert_run.trace_context AS jsonb), insert_run.parent_close,
        insert_run.queue, insert_run.concurrency_key, insert_run.priority)
    ON CONFLICT DO NOTHING
    RETURNING *
), queued AS (
    INSERT INTO {schema}.queues (name) SELECT insert_run.queue
        WHERE CAST(insert_run.queue AS text) IS NOT NULL
    ON CONFLICT (name) DO NOTHING
), notified AS (
    SELECT pg_notify(insert_run.channel, 'run') FROM ins WHERE ins.available_at <= now()
)
    SELECT ins.* FROM ins, (SELECT count(*) FROM notified) AS n;
END
$$;

-- `start(...)` for any language: the run's id. The rules of a thin client's start (a
-- Python `Durably(url)` that registers no workflow; `App._start_by_name`): the database
-- cannot know the registered workflows, so any name is taken, and a name or version no
-- worker serves stays pending (`durably runs --stuck` lists it). `version` NULL or '': the
-- newest version of the name that a worker registers, bound by its claim with that
-- version's max_attempts (`records.NEWEST`); a run started so has no queue. `queue`: the
-- workflow's queue (the name given to `app.queue`), for its limits to hold; a version is
-- needed then. `input` is stored as the jsonb's text: its own key order (shorter keys
-- first), one of duplicate keys, numbers as jsonb writes them (1e2 is 100, an int). That
-- is what the workflow receives, on every replay too. A repeated key with an equal input
-- (compared as the Python client compares: `same_json`) answers the run it started;
-- another input raises 23505. Concurrent starts with one key make one run: the second
-- waits for the first's transaction, then answers its run (or inserts, if it rolled back);
-- in a REPEATABLE READ or SERIALIZABLE transaction it fails instead (40001), to be retried.
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
            SELECT r.id, r.input INTO existing FROM {schema}.runs r
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

-- `send_signal(...)` for any language: the §4.3 result as a jsonb object of
-- "delivered_to" (run ids), "buffered" and "duplicate" (booleans). The rules of
-- `Sends.send_signal_in`: a key already sent answers that send (duplicate); `run_id`
-- addresses one run, refused when it is unknown (P0002) or finished (55000); both looked up
-- under the name's lock. `data` is stored as the jsonb's text (see start_run); NULL is JSON
-- null. `expires`: a buffered signal past it is never delivered. Six parameters: the
-- engine's own send_signal has seven, none defaulted, so no call fits both.
CREATE OR REPLACE FUNCTION {schema}.send_signal(
    name text, data jsonb, idempotency_key text DEFAULT NULL, run_id text DEFAULT NULL,
    namespace text DEFAULT 'default', expires interval DEFAULT NULL
) RETURNS jsonb
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    sent record;
    state text;
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
    IF send_signal.run_id IS NOT NULL THEN
        -- Locked as the send will update it (see `Sends._live_run`).
        SELECT r.status INTO state FROM {schema}.runs r WHERE r.id = send_signal.run_id
        FOR NO KEY UPDATE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'no run with id %', quote_literal(send_signal.run_id)
                USING ERRCODE = 'P0002';
        ELSIF state IN ('completed', 'failed', 'canceled') THEN
            RAISE EXCEPTION 'cannot signal run %: it is already %', send_signal.run_id, state
                USING ERRCODE = '55000';
        END IF;
    END IF;
    SELECT s.delivered_to, s.buffered INTO sent FROM {schema}.send_signal(
        send_signal.namespace, send_signal.name,
        COALESCE(CAST(send_signal.data AS text), 'null'), send_signal.idempotency_key,
        send_signal.run_id, CAST(extract(epoch FROM send_signal.expires) AS float8),
        'durably_' || (parse_ident('{schema}'))[1]
    ) AS s;
    RETURN jsonb_build_object('delivered_to', sent.delivered_to, 'buffered', sent.buffered,
                              'duplicate', false);
END
$$;

COMMENT ON FUNCTION {schema}.start_run(text, text, jsonb, text, text, timestamptz,
    timestamptz, text, integer, text) IS
    'Start a run of workflow (version NULL or empty: the newest a worker registers) with '
    'input, in the caller''s transaction; its id. The input is stored as the jsonb''s own '
    'text (its key order). A repeated idempotency_key answers its run, or raises 23505 '
    'for another input; bad arguments raise 22023.';
COMMENT ON FUNCTION {schema}.send_signal(text, jsonb, text, text, text, interval) IS
    'Send signal name with data to every run waiting on it (or run_id), else buffer it, '
    'in the caller''s transaction; a jsonb object of delivered_to (run ids), buffered and '
    'duplicate. SQLSTATE P0002: no such run; 55000: the run has finished.';
