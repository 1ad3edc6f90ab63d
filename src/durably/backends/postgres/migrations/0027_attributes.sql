-- Search attributes (SPEC §4.24, core/attributes.py): a run's flat labels, a jsonb object
-- of scalars, matched by containment (`attributes @> '{{"customer": "c-1"}}'`) through a GIN
-- index of jsonb_path_ops (a hash per key-and-value path: small, and it serves exactly @>).
-- Partial: the runs without attributes (NULL, most of them) cost that index nothing, on
-- insert or anywhere. Never encrypted (they are what operators search by).
-- The column comes first, in the migration's transaction (a moment's lock, waited for
-- briefly and tried again as any migration's); the functions of the SQL API change with
-- it; the index is built after that transaction commits, CONCURRENTLY (the part after the
-- `then outside a transaction` line, see the migrator): a build in the transaction would
-- hold every write to runs for as long as it reads the table. Every statement is a no-op
-- once done: a migration stopped between the two parts is run again from the top.
-- A worker of the previous release writes no attributes (NULL) and reads none.
ALTER TABLE {schema}.runs ADD COLUMN IF NOT EXISTS attributes jsonb;

-- What `core.attributes.check_attributes` refuses, refused in SQL (22023): an object of
-- at most 64 keys, each a non-empty string of at most 128 characters, each value a
-- string of at most 1024 characters, a number (an integer within 64 bits) or a boolean.
CREATE OR REPLACE FUNCTION {schema}.check_attributes(attributes jsonb) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    item record;
BEGIN
    IF check_attributes.attributes IS NULL THEN
        RETURN;
    ELSIF jsonb_typeof(check_attributes.attributes) <> 'object' THEN
        RAISE EXCEPTION 'attributes must be a JSON object of names to values, not %',
            jsonb_typeof(check_attributes.attributes) USING ERRCODE = '22023';
    END IF;
    IF (SELECT count(*) FROM jsonb_object_keys(check_attributes.attributes)) > 64 THEN
        RAISE EXCEPTION 'attributes hold more than 64 keys' USING ERRCODE = '22023';
    END IF;
    FOR item IN SELECT e.key, e.value FROM jsonb_each(check_attributes.attributes) AS e LOOP
        IF item.key = '' OR length(item.key) > 128 THEN
            RAISE EXCEPTION 'an attribute key must be a non-empty string of at most 128 '
                'characters, not %', quote_literal(left(item.key, 80)) USING ERRCODE = '22023';
        ELSIF jsonb_typeof(item.value) NOT IN ('string', 'number', 'boolean') THEN
            RAISE EXCEPTION 'the value of attribute % is %: an attribute is a string, a '
                'number or a boolean', quote_literal(item.key), jsonb_typeof(item.value)
                USING ERRCODE = '22023';
        ELSIF jsonb_typeof(item.value) = 'string' AND length(item.value #>> '{{}}') > 1024 THEN
            RAISE EXCEPTION 'the value of attribute % is a string of more than 1024 '
                'characters; an attribute is a short label', quote_literal(item.key)
                USING ERRCODE = '22023';
        ELSIF jsonb_typeof(item.value) = 'number' AND CAST(item.value AS text) !~ '[.eE]'
              AND abs(CAST(item.value AS text)::numeric) > 9223372036854775807 THEN
            RAISE EXCEPTION 'the value of attribute % is an integer beyond 64 bits; store '
                'it as a string', quote_literal(item.key) USING ERRCODE = '22023';
        END IF;
    END LOOP;
END
$$;

-- `insert_run` (0021) and the named query it is the twin of write the run's attributes
-- (text: the JSON the client encoded, or NULL); `start_run` (0024) takes them, last, with
-- a default: a call of the old form is a call of the new one. A new parameter list needs
-- the old function dropped (see 0021's header); both are replaced in this transaction,
-- so no caller finds neither. `check_readable` stays as 0021 made it.
DROP FUNCTION IF EXISTS {schema}.start_run(text, text, jsonb, text, text, timestamptz,
    timestamptz, text, integer, text);
DROP FUNCTION IF EXISTS {schema}.insert_run(text, text, text, text, text, text, integer,
    timestamptz, timestamptz, text, text, text, text, text, integer, text);
DROP FUNCTION IF EXISTS {schema}.insert_run(text, text, text, text, text, text, integer,
    timestamptz, timestamptz, text, text, text, text, text, integer, text, text);
DROP FUNCTION IF EXISTS {schema}.start_run(text, text, jsonb, text, text, timestamptz,
    timestamptz, text, integer, text, jsonb);

CREATE FUNCTION {schema}.insert_run(
    id text, namespace text, workflow text, version text, input text, idempotency_key text,
    max_attempts integer, available_at timestamptz, deadline_at timestamptz,
    parent_run_id text, trace_context text, parent_close text, queue text,
    concurrency_key text, priority integer, channel text, attributes text
) RETURNS SETOF {schema}.runs
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
WITH ins AS (
    INSERT INTO {schema}.runs (id, namespace, workflow, version, status, input, idempotency_key,
        max_attempts, available_at, deadline_at, parent_run_id, trace_context, parent_close,
        queue, concurrency_key, priority, attributes)
    VALUES (insert_run.id, insert_run.namespace, insert_run.workflow, insert_run.version,
        'pending', CAST(insert_run.input AS json),
        insert_run.idempotency_key, insert_run.max_attempts,
        LEAST(COALESCE(CAST(insert_run.available_at AS timestamptz), now()),
            CAST(insert_run.deadline_at AS timestamptz)),
        insert_run.deadline_at, insert_run.parent_run_id,
        CAST(insert_run.trace_context AS jsonb), insert_run.parent_close,
        insert_run.queue, insert_run.concurrency_key, insert_run.priority,
        CAST(insert_run.attributes AS jsonb))
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

-- `start_run` as in 0024, with `attributes` (NULL or {{}}: none), checked before anything
-- is written. An idempotent repeat answers the run it started; its attributes are those
-- it was started with (a repeat's are not compared, nor merged).
CREATE FUNCTION {schema}.start_run(
    workflow text, version text, input jsonb, idempotency_key text DEFAULT NULL,
    queue text DEFAULT NULL, available_at timestamptz DEFAULT NULL,
    deadline_at timestamptz DEFAULT NULL, concurrency_key text DEFAULT NULL,
    priority integer DEFAULT 0, namespace text DEFAULT 'default',
    attributes jsonb DEFAULT NULL
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
    PERFORM {schema}.check_attributes(start_run.attributes);
    LOOP
        SELECT r.id INTO started FROM {schema}.insert_run(
            replace(CAST(gen_random_uuid() AS text), '-', ''), start_run.namespace,
            start_run.workflow, bound, given, start_run.idempotency_key, 0,
            start_run.available_at, start_run.deadline_at, NULL, NULL, 'cancel',
            start_run.queue, start_run.concurrency_key, COALESCE(start_run.priority, 0),
            'durably_' || (parse_ident('{schema}'))[1],
            CAST(NULLIF(start_run.attributes, '{{}}'::jsonb) AS text)
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

COMMENT ON FUNCTION {schema}.start_run(text, text, jsonb, text, text, timestamptz,
    timestamptz, text, integer, text, jsonb) IS
    'Start a run of workflow (version NULL or empty: the newest a worker registers) with '
    'input, in the caller''s transaction; its id. The input is stored as the jsonb''s own '
    'text (its key order). attributes: a jsonb object of search attributes (scalars). A '
    'repeated idempotency_key answers its run, or raises 23505 for another input; bad '
    'arguments raise 22023.';

-- durably: then outside a transaction
CREATE INDEX CONCURRENTLY IF NOT EXISTS runs_attributes ON {schema}.runs
    USING gin (attributes jsonb_path_ops) WHERE attributes IS NOT NULL;
