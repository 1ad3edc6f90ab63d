-- Named queries of the SQLite backend: the same names and meaning as PostgreSQL's.
-- `{schema}_` prefixes the tables; `now()` is the engine's clock (Unix seconds), registered
-- on every connection. Every write runs in a BEGIN IMMEDIATE transaction, which holds the
-- database's write lock, so a lease checked inside one cannot be taken over before commit.
-- A block may hold several statements; the rows of the last one that returns rows come back.

-- name: insert_run
-- A queue has a row from its first run on (see the PostgreSQL twin).
INSERT INTO {schema}_queues (name, updated_at) SELECT :queue, now() WHERE :queue IS NOT NULL
ON CONFLICT (name) DO NOTHING;
INSERT INTO {schema}_runs (id, namespace, workflow, version, status, input, idempotency_key,
    max_attempts, available_at, deadline_at, parent_run_id, trace_context, parent_close,
    created_at, updated_at, queue, concurrency_key, priority, attributes)
VALUES (:id, :namespace, :workflow, :version, 'pending', :input, :idempotency_key,
    :max_attempts,
    min(coalesce(:available_at, now()), coalesce(:deadline_at, :available_at, now())),
    :deadline_at, :parent_run_id, :trace_context, :parent_close, now(), now(),
    :queue, :concurrency_key, :priority, :attributes)
ON CONFLICT DO NOTHING
RETURNING *, 0 AS notified;

-- name: debounce_run
-- A debounced start (see the PostgreSQL twin and 0025); its transaction holds the write
-- lock, so starts and claims take turns. The clock is read once (`t`): the window's cap
-- and the run's first due time are the same instant apart as on PostgreSQL. `min` of
-- SQLite is NULL if any argument is: an absent cap or deadline is the due time itself. The
-- due time proposed (`excluded`) is this start's; a window's cap bounds it.
INSERT INTO {schema}_queues (name, updated_at) SELECT :queue, now() WHERE :queue IS NOT NULL
ON CONFLICT (name) DO NOTHING;
INSERT INTO {schema}_runs AS r (id, namespace, workflow, version, status, input,
    max_attempts, available_at, deadline_at, trace_context, created_at, updated_at, queue,
    concurrency_key, priority, debounce_key, debounce_max_at, attributes)
SELECT :id, :namespace, :workflow, :version, 'pending', :input, :max_attempts,
    min(t + :debounce_s, coalesce(t + :debounce_max_s, t + :debounce_s),
        coalesce(:deadline_at, t + :debounce_s)),
    :deadline_at, :trace_context, t, t, :queue, :concurrency_key, :priority,
    :debounce_key, t + :debounce_max_s, NULL
FROM (SELECT now() AS t) WHERE true
ON CONFLICT (namespace, workflow, debounce_key)
    WHERE debounce_key IS NOT NULL AND status = 'pending' AND fence = 0
DO UPDATE SET input = excluded.input, version = excluded.version,
    max_attempts = excluded.max_attempts, deadline_at = excluded.deadline_at,
    queue = excluded.queue, concurrency_key = excluded.concurrency_key,
    priority = excluded.priority,
    available_at = min(excluded.available_at, coalesce(r.debounce_max_at, excluded.available_at)),
    updated_at = excluded.updated_at;
-- A join's search attributes merge into the run's, as set_attributes does: in a statement
-- of their own, since a trigger's INSERT OR REPLACE (which keeps the index table) takes
-- the upsert's conflict handling inside one.
UPDATE {schema}_runs SET attributes = CASE WHEN :attributes IS NULL THEN attributes
    ELSE json_patch(coalesce(attributes, '{}'), :attributes) END
WHERE namespace = :namespace AND workflow = :workflow AND debounce_key = :debounce_key
  AND status = 'pending' AND fence = 0
RETURNING *, 0 AS notified;

-- name: get_run_by_key
SELECT * FROM {schema}_runs
WHERE namespace = :namespace AND workflow = :workflow AND idempotency_key = :idempotency_key;

-- name: get_run
SELECT * FROM {schema}_runs WHERE id = :run_id;

-- name: ended_runs
SELECT id FROM {schema}_runs
WHERE id IN (SELECT value FROM json_each(:ids)) AND status IN ('continued', 'completed', 'failed', 'canceled')
  AND NOT compensating;

-- name: get_run_for_update
SELECT * FROM {schema}_runs WHERE id = :run_id;

-- name: list_runs
SELECT * FROM {schema}_runs
WHERE (:status IS NULL OR status = :status)
  AND (:workflow IS NULL OR workflow = :workflow)
  AND (:queue IS NULL OR queue = :queue)
  AND (:due_before IS NULL
       OR (available_at <= :due_before AND status IN ('pending', 'waiting', 'running')))
  AND (:created_after IS NULL OR created_at >= :created_after)
  AND (:namespace IS NULL OR namespace = :namespace)
  AND (:idempotency_key IS NULL OR idempotency_key = :idempotency_key)
ORDER BY created_at DESC, id
LIMIT :limit OFFSET :offset;

-- name: list_runs_by_attributes
-- list_runs of the runs whose attributes hold every key of :attributes with an equal value
-- (the PostgreSQL twin's @>), from run_attributes (0027): the runs of the filter's rarest
-- key and value (each counted in the (key, value) index, up to 1000) read from that index,
-- each checked for the other keys by its primary key, then looked up by id. A value is
-- compared as 0027's triggers store it. Driven by one key as the join of them all read
-- every run of a common value (`region=eu`) for each call.
WITH wanted AS (
    SELECT f.key, CASE f.type WHEN 'true' THEN x'01' WHEN 'false' THEN x'00'
                  ELSE f.value END AS value
    FROM json_each(:attributes) AS f
), rarest AS (
    SELECT w.key, w.value FROM wanted AS w
    ORDER BY (SELECT count(*) FROM (SELECT 1 FROM {schema}_run_attributes AS a
                                    WHERE a.key = w.key AND a.value = w.value LIMIT 1000))
    LIMIT 1
)
SELECT * FROM {schema}_runs
WHERE id IN (
    SELECT a.run_id FROM rarest
    JOIN {schema}_run_attributes AS a ON a.key = rarest.key AND a.value = rarest.value
    WHERE NOT EXISTS (
        SELECT 1 FROM wanted AS w
        WHERE NOT EXISTS (SELECT 1 FROM {schema}_run_attributes AS b
                          WHERE b.run_id = a.run_id AND b.key = w.key AND b.value = w.value)))
  AND (:status IS NULL OR status = :status)
  AND (:workflow IS NULL OR workflow = :workflow)
  AND (:queue IS NULL OR queue = :queue)
  AND (:due_before IS NULL
       OR (available_at <= :due_before AND status IN ('pending', 'waiting', 'running')))
  AND (:created_after IS NULL OR created_at >= :created_after)
  AND (:namespace IS NULL OR namespace = :namespace)
  AND (:idempotency_key IS NULL OR idempotency_key = :idempotency_key)
ORDER BY created_at DESC, id
LIMIT :limit OFFSET :offset;

-- name: list_due
SELECT * FROM {schema}_runs
WHERE available_at <= now() AND status IN ('pending', 'waiting', 'running')
ORDER BY available_at
LIMIT :limit;

-- name: list_steps
SELECT s.*, s.id AS attempt_id FROM {schema}_step_attempts s
WHERE run_id = :run_id ORDER BY started_at, id;

-- name: claim
UPDATE {schema}_runs SET
    fence = fence + 1,  -- worker_id: set last (see below)
    status = CASE WHEN status IN ('pending', 'waiting', 'held') THEN 'running' ELSE status END,
    error = CASE WHEN status = 'held' THEN NULL ELSE error END,  -- see hold_run
    attempts = max(attempts, 1),
    lease_expires_at = now() + :lease,
    available_at = now() + :lease,
    wake_requested = 0, waiting_for = NULL, wake_at = NULL,
    started_at = coalesce(started_at, now()),
    updated_at = now(),
    claim_token = :token,
    -- A run a thin client started by name: bound as the PostgreSQL twin says.
    version = CASE WHEN version <> '' THEN version ELSE (
        SELECT b.value FROM json_each(:workflows) w JOIN json_each(:versions) v
            ON w.key = v.key JOIN json_each(:binds) b ON b.key = w.key
        WHERE w.value = {schema}_runs.workflow AND v.value = '') END,
    max_attempts = CASE WHEN max_attempts <> 0 THEN max_attempts ELSE (
        SELECT a.value FROM json_each(:workflows) w JOIN json_each(:versions) v
            ON w.key = v.key JOIN json_each(:max_attempts) a ON a.key = w.key
        WHERE w.value = {schema}_runs.workflow AND v.value = {schema}_runs.version) END
WHERE id IN (
    -- The oldest due runs of each (workflow, version) served, in the namespace, from one
    -- range of runs_due per pair (runs of versions no worker here serves, or of other
    -- namespaces, are never read); then the oldest.
    -- CROSS JOIN keeps the pairs outermost whatever the statistics say.
    -- Runs of a queue no worker declares are unqueued runs too (see the PostgreSQL twin:
    -- here the claim's IMMEDIATE transaction keeps out a declaration meanwhile).
    SELECT id FROM (
        SELECT r.id, r.available_at
        FROM json_each(:workflows) w JOIN json_each(:versions) v ON w.key = v.key
        CROSS JOIN {schema}_runs r WHERE r.id IN (
            SELECT id FROM {schema}_runs
            WHERE namespace = :namespace AND workflow = w.value AND version = v.value
              AND available_at <= now() AND queue IS NULL  -- queued runs: claim_queue
              AND id NOT IN (SELECT value FROM json_each(:held))  -- still executing here
            ORDER BY available_at
            LIMIT :limit)
        UNION ALL
        SELECT r.id, r.available_at
        FROM {schema}_queues q
        CROSS JOIN json_each(:workflows) w JOIN json_each(:versions) v ON w.key = v.key
        CROSS JOIN {schema}_runs r
        WHERE (q.declared_until IS NULL OR q.declared_until <= now()) AND r.id IN (
            SELECT id FROM {schema}_runs
            WHERE namespace = :namespace AND workflow = w.value AND version = v.value
              AND queue = q.name AND available_at <= now()
              AND id NOT IN (SELECT value FROM json_each(:held))
            ORDER BY priority DESC, available_at
            LIMIT :limit))
    ORDER BY available_at
    LIMIT :limit
);
UPDATE {schema}_step_attempts SET status = 'abandoned', finished_at = now()
WHERE status = 'running' AND kind IN ('function', 'transaction')
  AND run_id IN (SELECT id FROM {schema}_runs WHERE claim_token = :token);
SELECT r.*, now() AS db_now,
    (SELECT json_group_array(json_object(
        'position', position, 'attempt', attempt, 'step', step, 'kind', kind,
        'status', status, 'final', final, 'compensable', compensable, 'signal', signal,
        'child_run_id', child_run_id, 'wake_at', wake_at,
        'output', json(output), 'error', json(error),
        'workflow_attempt', workflow_attempt, 'seq', seq,
        'delivered', delivered_at IS NOT NULL))
     FROM (SELECT * FROM {schema}_step_attempts s WHERE s.run_id = r.id
           ORDER BY position, attempt)) AS history,
    -- Still the previous holder's, whose lease expired (a takeover; NULL: no worker held
    -- the run): the claimer's comes after it, and replaces it in the row.
    r.worker_id AS taken_from, :worker_id AS worker_id
FROM {schema}_runs r WHERE claim_token = :token;
UPDATE {schema}_runs SET worker_id = :worker_id, claim_token = NULL WHERE claim_token = :token;

-- name: next_due
-- See the PostgreSQL twin: unqueued runs of the namespace, and its runs of a queue no
-- worker declares.
SELECT (SELECT min(n.next_at) FROM (
            SELECT (SELECT min(available_at) FROM {schema}_runs
                    WHERE namespace = :namespace AND workflow = w.value
                      AND version = v.value AND available_at IS NOT NULL
                      AND queue IS NULL) AS next_at
            FROM json_each(:workflows) w JOIN json_each(:versions) v ON w.key = v.key
            UNION ALL
            SELECT (SELECT min(available_at) FROM {schema}_runs
                    WHERE namespace = :namespace AND workflow = w.value
                      AND version = v.value AND queue = q.name AND available_at IS NOT NULL)
            FROM {schema}_queues q
            CROSS JOIN json_each(:workflows) w JOIN json_each(:versions) v ON w.key = v.key
            WHERE q.declared_until IS NULL OR q.declared_until <= now()) n)
       AS next_at, now() AS db_now;

-- name: heartbeat
UPDATE {schema}_runs SET lease_expires_at = now() + :lease, available_at = now() + :lease
WHERE id IN (SELECT value FROM json_each(:ids))  -- looked up: not a scan of runs
  AND worker_id = :worker_id AND lease_expires_at > now() AND (status = 'running' OR compensating)
  AND EXISTS (SELECT 1 FROM json_each(:ids) i JOIN json_each(:fences) f ON i.key = f.key
              WHERE i.value = {schema}_runs.id AND f.value = {schema}_runs.fence)
RETURNING id, status, wake_requested;

-- name: held_since
-- What heartbeat would say, read (on a connection of its own) while a step.transaction
-- body of this process holds the write lock, for the leases live when it took the lock
-- (`:since`): nobody else can claim until it lets go (see bodies.py).
SELECT id, status, wake_requested FROM {schema}_runs
WHERE id IN (SELECT value FROM json_each(:ids))
  AND worker_id = :worker_id AND lease_expires_at > :since AND (status = 'running' OR compensating)
  AND EXISTS (SELECT 1 FROM json_each(:ids) i JOIN json_each(:fences) f ON i.key = f.key
              WHERE i.value = {schema}_runs.id AND f.value = {schema}_runs.fence);

-- name: renew_held
-- heartbeat, written in that body's transaction before it lets go of the lock.
UPDATE {schema}_runs SET lease_expires_at = now() + :lease, available_at = now() + :lease
WHERE id IN (SELECT value FROM json_each(:ids))
  AND worker_id = :worker_id AND lease_expires_at > :since AND (status = 'running' OR compensating)
  AND EXISTS (SELECT 1 FROM json_each(:ids) i JOIN json_each(:fences) f ON i.key = f.key
              WHERE i.value = {schema}_runs.id AND f.value = {schema}_runs.fence);

-- name: check_lease
SELECT now() AS db_now FROM {schema}_runs
WHERE id = :run_id AND fence = :fence AND worker_id = :worker_id
  AND lease_expires_at > now() AND (status = 'running' OR compensating);

-- name: body_lease
-- check_lease, as a `step.transaction` body's transaction opens (see PostgreSQL's).
SELECT now() AS db_now FROM {schema}_runs
WHERE id = :run_id AND fence = :fence AND worker_id = :worker_id
  AND lease_expires_at > now() AND (status = 'running' OR compensating);

-- name: record_start
INSERT INTO {schema}_step_attempts (run_id, position, attempt, step, kind, status, fence,
    worker_id, signal, child_run_id, wake_at, started_at, workflow_attempt)
SELECT :run_id, :position, :attempt, :step, :kind, 'running', :fence, :worker_id, :signal,
    :child_run_id, CASE WHEN :wait_s IS NULL THEN NULL ELSE now() + :wait_s END, now(),
    :workflow_attempt
WHERE EXISTS (SELECT 1 FROM {schema}_runs
    WHERE id = :run_id AND fence = :fence AND worker_id = :worker_id
      AND lease_expires_at > now()
      AND (status = 'running' OR (compensating AND :position < 0)))
ON CONFLICT (run_id, position, attempt) DO NOTHING
RETURNING wake_at;

-- name: record_finish
-- A completed record is never overwritten (see the PostgreSQL twin).
INSERT INTO {schema}_step_attempts (run_id, position, attempt, step, kind, status, final,
    compensable, fence, worker_id, output, error, started_at, finished_at, workflow_attempt,
    seq, wake_at, signal, delivered_at, signal_expires_at)
SELECT :run_id, :position, :attempt, :step, :kind, :status, :final, :compensable, :fence,
    :worker_id, :output, :error, now() - :elapsed_s, now(), :workflow_attempt, :seq, :wake_at,
    :signal, CASE WHEN :signal IS NOT NULL THEN now() END, :signal_expires_at
WHERE EXISTS (SELECT 1 FROM {schema}_runs
    WHERE id = :run_id AND fence = :fence AND worker_id = :worker_id
      AND lease_expires_at > now() AND (status = 'running' OR compensating))
ON CONFLICT (run_id, position, attempt) DO UPDATE SET
    status = excluded.status, final = excluded.final, compensable = excluded.compensable,
    output = excluded.output, error = excluded.error, finished_at = excluded.finished_at,
    seq = excluded.seq, wake_at = excluded.wake_at
WHERE {schema}_step_attempts.status <> 'completed'
RETURNING id;

-- name: get_attempt
SELECT * FROM {schema}_step_attempts
WHERE run_id = :run_id AND position = :position AND attempt = :attempt;

-- name: resolve_wait
-- End a wait as the next entry of the run's log; a delivered signal's data wins (and
-- says so: a timeout stores null, as a signal of null data does).
UPDATE {schema}_step_attempts SET
    status = CASE WHEN delivered_at IS NOT NULL THEN 'completed' ELSE :status END,
    final = (delivered_at IS NULL AND :status = 'failed'),
    output = CASE WHEN delivered_at IS NOT NULL THEN output ELSE :output END,
    error = CASE WHEN delivered_at IS NOT NULL THEN NULL ELSE :error END,
    seq = :seq, finished_at = now()
WHERE run_id = :run_id AND position = :position AND attempt = :attempt AND status = 'running'
  AND EXISTS (SELECT 1 FROM {schema}_runs
    WHERE id = :run_id AND fence = :fence AND worker_id = :worker_id
      AND lease_expires_at > now() AND (status = 'running' OR compensating))
RETURNING status, output, error, delivered_at IS NOT NULL AS delivered;

-- name: park
UPDATE {schema}_runs SET
    status = CASE WHEN wake_requested THEN 'pending' ELSE :status END,
    available_at = CASE WHEN wake_requested THEN now()
                        ELSE min(coalesce(:wake_at, deadline_at), coalesce(deadline_at, :wake_at))
                   END,
    wake_at = :wake_at, waiting_for = :waiting_for, error = :error,
    parked_on = :parked_on, parked_fence = fence,
    wake_requested = 0, worker_id = NULL, lease_expires_at = NULL, holds = 0,
    updated_at = now()
WHERE id = :run_id AND fence = :fence AND worker_id = :worker_id
  AND lease_expires_at > now() AND status = 'running'
RETURNING available_at;

-- name: release
UPDATE {schema}_runs SET
    status = CASE WHEN status = 'running' THEN 'pending' ELSE status END,
    available_at = now(), worker_id = NULL, lease_expires_at = NULL, updated_at = now()
WHERE id = :run_id AND fence = :fence AND worker_id = :worker_id
RETURNING id;

-- name: hold_run
-- See the PostgreSQL twin.
UPDATE {schema}_runs SET
    status = CASE WHEN status = 'running' THEN 'held' ELSE status END,
    error = CASE WHEN status = 'running' THEN :error ELSE error END, holds = holds + 1,
    available_at = now() + :delay_s,
    wake_requested = 0, worker_id = NULL, lease_expires_at = NULL, updated_at = now()
WHERE id = :run_id AND fence = :fence AND worker_id = :worker_id
  AND lease_expires_at > now() AND (status = 'running' OR compensating)
RETURNING available_at;

-- name: retry_run
UPDATE {schema}_runs SET
    status = 'pending', attempts = attempts + 1, error = :error,
    available_at = min(now() + :delay_s, coalesce(deadline_at, now() + :delay_s)),
    worker_id = NULL, lease_expires_at = NULL, holds = 0, updated_at = now()
WHERE id = :run_id AND fence = :fence AND worker_id = :worker_id
  AND lease_expires_at > now() AND status = 'running'
RETURNING id;

-- name: give_back_signal
-- See the PostgreSQL twin: the signal a wait holds goes back, once, with its expiry.
INSERT INTO {schema}_signals (namespace, name, data, run_id, buffered, given_back, created_at,
    expires_at)
SELECT r.namespace, a.signal, a.output, :run_id, 1, 1, now(), a.signal_expires_at
FROM {schema}_step_attempts a JOIN {schema}_runs r ON r.id = a.run_id
WHERE a.run_id = :run_id AND a.position = :position AND a.seq = :seq
  AND a.kind = 'signal-wait' AND a.status = 'completed' AND a.delivered_at IS NOT NULL
  AND r.fence = :fence AND r.worker_id = :worker_id AND r.lease_expires_at > now()
  AND r.status = 'running';
UPDATE {schema}_step_attempts SET delivered_at = NULL
WHERE run_id = :run_id AND position = :position AND seq = :seq AND kind = 'signal-wait'
  AND status = 'completed' AND delivered_at IS NOT NULL
  AND EXISTS (SELECT 1 FROM {schema}_runs
    WHERE id = :run_id AND fence = :fence AND worker_id = :worker_id
      AND lease_expires_at > now() AND status = 'running');
SELECT count(*) AS held FROM {schema}_runs
WHERE id = :run_id AND fence = :fence AND worker_id = :worker_id AND lease_expires_at > now()
  AND status = 'running';

-- name: finish_run
-- The run's end (see the PostgreSQL twin): records not yet durable ride along, leftover
-- running attempts are canceled, the parent is woken, a cancel's error is kept.
UPDATE {schema}_runs SET claim_token = :token
WHERE id = :run_id AND fence = :fence AND worker_id = :worker_id
  AND lease_expires_at > now() AND (status = 'running' OR compensating)
  AND (status <> 'canceled' OR :status = 'canceled');
INSERT INTO {schema}_step_attempts (run_id, position, attempt, step, kind, status, final,
    compensable, fence, worker_id, output, error, started_at, finished_at, workflow_attempt,
    seq, wake_at)
SELECT v.value ->> 'run_id', v.value ->> 'position', v.value ->> 'attempt', v.value ->> 'step',
    v.value ->> 'kind', v.value ->> 'status', v.value ->> 'final', v.value ->> 'compensable',
    v.value ->> 'fence', :worker_id, json(v.value -> 'output'), json(v.value -> 'error'),
    now() - (v.value ->> 'elapsed_s'), now(), v.value ->> 'workflow_attempt',
    v.value ->> 'seq', v.value ->> 'wake_s'
FROM json_each(:batch) v
WHERE EXISTS (SELECT 1 FROM {schema}_runs WHERE claim_token = :token)
ON CONFLICT (run_id, position, attempt) DO UPDATE SET
    status = excluded.status, final = excluded.final, compensable = excluded.compensable,
    output = excluded.output, error = excluded.error, finished_at = excluded.finished_at,
    seq = excluded.seq, wake_at = excluded.wake_at
WHERE {schema}_step_attempts.status <> 'completed';
UPDATE {schema}_step_attempts SET status = 'canceled', finished_at = now()
WHERE status = 'running' AND run_id IN (SELECT id FROM {schema}_runs WHERE claim_token = :token);
UPDATE {schema}_runs SET
    wake_requested = (status = 'running'),
    status = CASE WHEN status = 'waiting' THEN 'pending' ELSE status END,
    available_at = CASE WHEN status = 'waiting' THEN now() ELSE available_at END,
    updated_at = now()
WHERE status IN ('waiting', 'running', 'pending')
  AND id = (SELECT parent_run_id FROM {schema}_runs WHERE claim_token = :token)
  AND (status = 'waiting' AND parked_fence = fence AND parked_on IS NOT NULL  -- see 0020
    AND NOT EXISTS (SELECT 1 FROM json_each({schema}_runs.parked_on) w
                    JOIN {schema}_runs c ON c.id = w.value WHERE c.claim_token = :token)
  ) IS NOT TRUE;
UPDATE {schema}_runs SET
    status = :status, output = :output, error = coalesce(:error, error),
    available_at = NULL, worker_id = NULL, lease_expires_at = NULL, compensating = 0,
    finished_at = coalesce(finished_at, now()), updated_at = now(), claim_token = NULL
WHERE claim_token = :token
RETURNING id, 0 AS notified;

-- name: finish_many
-- The ends of several runs held by one worker, as one group commit (see the PostgreSQL
-- twin): each run ended as `finish_run` ends one; the ids returned are the runs ended.
UPDATE {schema}_runs SET claim_token = :token
WHERE id IN (SELECT value ->> 'run_id' FROM json_each(:ends))  -- looked up: not a scan
  AND worker_id = :worker_id AND lease_expires_at > now()
  AND (status = 'running' OR compensating)
  AND EXISTS (
    SELECT 1 FROM json_each(:ends) e
    WHERE e.value ->> 'run_id' = {schema}_runs.id AND e.value ->> 'fence' = {schema}_runs.fence
      AND ({schema}_runs.status <> 'canceled' OR e.value ->> 'status' = 'canceled'));
INSERT INTO {schema}_step_attempts (run_id, position, attempt, step, kind, status, final,
    compensable, fence, worker_id, output, error, started_at, finished_at, workflow_attempt,
    seq, wake_at)
SELECT v.value ->> 'run_id', v.value ->> 'position', v.value ->> 'attempt', v.value ->> 'step',
    v.value ->> 'kind', v.value ->> 'status', v.value ->> 'final', v.value ->> 'compensable',
    v.value ->> 'fence', :worker_id, json(v.value -> 'output'), json(v.value -> 'error'),
    now() - (v.value ->> 'elapsed_s'), now(), v.value ->> 'workflow_attempt',
    v.value ->> 'seq', v.value ->> 'wake_s'
FROM json_each(:batch) v
WHERE EXISTS (SELECT 1 FROM {schema}_runs WHERE claim_token = :token
              AND id = v.value ->> 'run_id' AND fence = v.value ->> 'fence')
ON CONFLICT (run_id, position, attempt) DO UPDATE SET
    status = excluded.status, final = excluded.final, compensable = excluded.compensable,
    output = excluded.output, error = excluded.error, finished_at = excluded.finished_at,
    seq = excluded.seq, wake_at = excluded.wake_at
WHERE {schema}_step_attempts.status <> 'completed';
UPDATE {schema}_step_attempts SET status = 'canceled', finished_at = now()
WHERE status = 'running' AND run_id IN (SELECT id FROM {schema}_runs WHERE claim_token = :token);
UPDATE {schema}_runs SET
    wake_requested = (status = 'running'),
    status = CASE WHEN status = 'waiting' THEN 'pending' ELSE status END,
    available_at = CASE WHEN status = 'waiting' THEN now() ELSE available_at END,
    updated_at = now()
WHERE status IN ('waiting', 'running', 'pending') AND claim_token IS NOT :token
  AND id IN (SELECT parent_run_id FROM {schema}_runs WHERE claim_token = :token)
  AND (status = 'waiting' AND parked_fence = fence AND parked_on IS NOT NULL  -- see 0020
    AND NOT EXISTS (SELECT 1 FROM json_each({schema}_runs.parked_on) w
                    JOIN {schema}_runs c ON c.id = w.value WHERE c.claim_token = :token)
  ) IS NOT TRUE;
UPDATE {schema}_runs SET
    status = e.value ->> 'status', output = e.value ->> 'output',
    error = coalesce(e.value ->> 'error', error),
    available_at = NULL, worker_id = NULL, lease_expires_at = NULL, compensating = 0,
    finished_at = coalesce(finished_at, now()), updated_at = now(), claim_token = NULL
FROM json_each(:ends) e
WHERE claim_token = :token AND e.value ->> 'run_id' = {schema}_runs.id
  AND e.value ->> 'fence' = {schema}_runs.fence
RETURNING id, 0 AS notified;

-- name: live_children
SELECT id FROM {schema}_runs
WHERE parent_run_id = :run_id AND parent_close = 'cancel'
  AND status IN ('pending', 'running', 'waiting', 'held');

-- name: lock_tree
-- The transaction's IMMEDIATE transaction already holds the database's write lock.
SELECT id, status FROM {schema}_runs WHERE id = :run_id;

-- name: cancel_tree
-- See the PostgreSQL twin: a run whose worker holds a live lease keeps it and is marked
-- canceled and compensating; that worker wraps it up.
WITH RECURSIVE tree(id) AS (
    SELECT id FROM {schema}_runs WHERE id = :run_id
    UNION ALL
    SELECT c.id FROM {schema}_runs c JOIN tree ON c.parent_run_id = tree.id
    WHERE c.parent_close = 'cancel'
)
UPDATE {schema}_runs SET claim_token = :token
WHERE id IN (SELECT id FROM tree) AND status IN ('pending', 'running', 'waiting', 'held');
UPDATE {schema}_step_attempts SET status = 'canceled', finished_at = now()
WHERE status = 'running' AND run_id IN (SELECT id FROM {schema}_runs WHERE claim_token = :token);
UPDATE {schema}_runs SET
    wake_requested = (status = 'running'),
    status = CASE WHEN status = 'waiting' THEN 'pending' ELSE status END,
    available_at = CASE WHEN status = 'waiting' THEN now() ELSE available_at END
WHERE status IN ('waiting', 'running') AND claim_token IS NULL
  AND id IN (SELECT parent_run_id FROM {schema}_runs WHERE claim_token = :token)
  AND (status = 'waiting' AND parked_fence = fence AND parked_on IS NOT NULL  -- see 0020
    AND NOT EXISTS (SELECT 1 FROM json_each({schema}_runs.parked_on) w
                    JOIN {schema}_runs c ON c.id = w.value WHERE c.claim_token = :token)
  ) IS NOT TRUE;
UPDATE {schema}_runs SET
    status = 'canceled', error = :error, updated_at = now(), claim_token = NULL,
    finished_at = CASE WHEN coalesce(lease_expires_at > now(), 0) OR EXISTS (
        SELECT 1 FROM {schema}_step_attempts s
        WHERE s.run_id = {schema}_runs.id AND s.compensable AND s.status = 'completed')
        THEN NULL ELSE now() END,
    fence = CASE WHEN coalesce(lease_expires_at > now(), 0) THEN fence ELSE fence + 1 END,
    worker_id = CASE WHEN coalesce(lease_expires_at > now(), 0) THEN worker_id END,
    compensating = coalesce(lease_expires_at > now(), 0) OR EXISTS (
        SELECT 1 FROM {schema}_step_attempts s
        WHERE s.run_id = {schema}_runs.id AND s.compensable AND s.status = 'completed'),
    available_at = CASE
        WHEN coalesce(lease_expires_at > now(), 0) THEN available_at
        WHEN EXISTS (SELECT 1 FROM {schema}_step_attempts s
                     WHERE s.run_id = {schema}_runs.id AND s.compensable
                       AND s.status = 'completed') THEN now() END,
    lease_expires_at = CASE WHEN coalesce(lease_expires_at > now(), 0) THEN lease_expires_at END
WHERE claim_token = :token
RETURNING id, 0 AS attempts, 0 AS notified;

-- name: lock_signal
SELECT 1 AS locked;

-- name: get_run_to_signal
SELECT * FROM {schema}_runs WHERE id = :run_id;

-- name: find_signal
SELECT * FROM {schema}_signals
WHERE namespace = :namespace AND name = :name AND idempotency_key = :idempotency_key;

-- name: send_signal
-- See PostgreSQL's. The runs reached are marked with :token while the signal is stored.
UPDATE {schema}_runs SET claim_token = :token
WHERE namespace = :namespace AND status IN ('pending', 'running', 'waiting', 'held')
  AND (:run_id IS NULL OR id = :run_id)
  AND id IN (SELECT run_id FROM {schema}_step_attempts
             WHERE kind = 'signal-wait' AND status = 'running' AND signal = :name
               AND delivered_at IS NULL);
UPDATE {schema}_step_attempts SET output = :data, delivered_at = now(),
    signal_expires_at = now() + :expires_s
WHERE id IN (
    SELECT (SELECT a.id FROM {schema}_step_attempts a
            WHERE a.run_id = r.id AND a.kind = 'signal-wait' AND a.status = 'running'
              AND a.signal = :name AND a.delivered_at IS NULL
            ORDER BY a.position LIMIT 1)
    FROM {schema}_runs r WHERE r.claim_token = :token);
INSERT INTO {schema}_signals (namespace, name, data, idempotency_key, run_id, delivered_to,
    buffered, created_at, expires_at)
SELECT :namespace, :name, :data, :idempotency_key, :run_id,
    (SELECT json_group_array(id) FROM (
        SELECT id FROM {schema}_runs WHERE claim_token = :token ORDER BY id)),
    NOT EXISTS (SELECT 1 FROM {schema}_runs WHERE claim_token = :token),
    now(), now() + :expires_s
RETURNING delivered_to, buffered;
UPDATE {schema}_runs SET
    wake_requested = (status = 'running'),
    status = CASE WHEN status = 'waiting' THEN 'pending' ELSE status END,
    available_at = CASE WHEN status = 'waiting' THEN now() ELSE available_at END,
    updated_at = now(), claim_token = NULL
WHERE claim_token = :token;

-- name: take_signal
UPDATE {schema}_signals SET consumed_by = :run_id, consumed_at = now()
WHERE id = (
    SELECT id FROM {schema}_signals
    WHERE namespace = :namespace AND name = :name AND buffered AND consumed_at IS NULL
      AND (run_id IS NULL OR run_id = :run_id) AND (expires_at IS NULL OR expires_at > now())
    ORDER BY given_back DESC, id LIMIT 1  -- what it got back first (see 0010)
)
RETURNING data, expires_at;

-- name: deliver_buffered
-- See the PostgreSQL twin. The wait receives the first signal the buffer holds for it (its
-- position comes back); then that signal is taken, if the wait received it (`changes()`).
WITH first AS (
    SELECT s.data, s.expires_at FROM {schema}_signals s JOIN {schema}_runs r ON r.id = :run_id
    WHERE s.namespace = r.namespace AND s.name = :name AND s.buffered
      AND s.consumed_at IS NULL AND (s.run_id IS NULL OR s.run_id = :run_id)
      AND (s.expires_at IS NULL OR s.expires_at > now())
    ORDER BY s.given_back DESC, s.id LIMIT 1
)
UPDATE {schema}_step_attempts SET output = (SELECT data FROM first), delivered_at = now(),
    signal_expires_at = (SELECT expires_at FROM first)
WHERE id = (
    SELECT a.id FROM {schema}_step_attempts a
    WHERE a.run_id = :run_id AND a.workflow_attempt = :workflow_attempt
      AND a.kind = 'signal-wait' AND a.status = 'running' AND a.signal = :name
      AND a.delivered_at IS NULL
    ORDER BY a.position LIMIT 1)
  AND EXISTS (SELECT 1 FROM first)
  AND EXISTS (SELECT 1 FROM {schema}_runs
    WHERE id = :run_id AND fence = :fence AND worker_id = :worker_id
      AND lease_expires_at > now() AND (status = 'running' OR compensating))
RETURNING position;
UPDATE {schema}_signals SET consumed_by = :run_id, consumed_at = now()
WHERE changes() = 1 AND id = (  -- the same one: the given-back signal, first, never expires
    SELECT s.id FROM {schema}_signals s JOIN {schema}_runs r ON r.id = :run_id
    WHERE s.namespace = r.namespace AND s.name = :name AND s.buffered
      AND s.consumed_at IS NULL AND (s.run_id IS NULL OR s.run_id = :run_id)
      AND (s.expires_at IS NULL OR s.expires_at > now())
    ORDER BY s.given_back DESC, s.id LIMIT 1);

-- name: list_tables
SELECT name FROM sqlite_master
WHERE type = 'table' AND name LIKE :schema || '\_%' ESCAPE '\' ORDER BY name;

-- name: check_held
SELECT id, status, wake_requested FROM {schema}_runs
WHERE id IN (SELECT value FROM json_each(:ids))  -- looked up: not a scan of runs
  AND EXISTS (SELECT 1 FROM json_each(:ids) i JOIN json_each(:fences) f ON i.key = f.key
              WHERE i.value = {schema}_runs.id AND f.value = {schema}_runs.fence)
  AND worker_id = :worker_id AND (status = 'running' OR compensating);

-- name: worker_seen
INSERT INTO {schema}_workers (id, workflows, concurrency, started_at, last_seen_at)
VALUES (:worker_id, :workflows_json, :concurrency, now(), now())
ON CONFLICT (id) DO UPDATE SET last_seen_at = now(), workflows = excluded.workflows
RETURNING id;

-- name: worker_gone
DELETE FROM {schema}_workers WHERE id = :worker_id OR last_seen_at < now() - 86400
RETURNING id;

-- name: list_workers
SELECT * FROM {schema}_workers ORDER BY started_at;

-- name: list_stuck
-- Held runs (they wait for code that matches their history: runs_held), and due runs.
SELECT r.* FROM {schema}_runs r WHERE r.status = 'held'
UNION ALL
SELECT r.* FROM {schema}_runs r
WHERE r.available_at <= now() AND r.status IN ('pending', 'waiting', 'running')
  AND (r.available_at <= now() - :grace_s
       OR NOT EXISTS (SELECT 1 FROM {schema}_workers w, json_each(w.workflows) j
                      WHERE w.last_seen_at > now() - :alive_s
                        AND json_extract(j.value, '$[0]') = r.workflow
                        AND json_extract(j.value, '$[1]') = r.version))
ORDER BY available_at
LIMIT :limit;

-- name: metrics
SELECT 'runs' AS metric, status AS label, CAST(count(*) AS REAL) AS value
FROM {schema}_runs GROUP BY status
UNION ALL
SELECT 'steps', status, count(*) FROM {schema}_step_attempts GROUP BY status
UNION ALL
SELECT 'due', '', count(*) FROM {schema}_runs
WHERE available_at <= now() AND status IN ('pending', 'waiting')
UNION ALL
SELECT 'claim_latency_avg', '', coalesce(avg(started_at - created_at), 0)
FROM {schema}_runs WHERE started_at > now() - 300
UNION ALL
SELECT 'worker_seen_age', id, now() - last_seen_at FROM {schema}_workers;

-- name: record_many
-- Group commit (see the PostgreSQL twin); a completed record is never overwritten.
INSERT INTO {schema}_step_attempts (run_id, position, attempt, step, kind, status, final,
    compensable, fence, worker_id, output, error, started_at, finished_at, workflow_attempt,
    seq, wake_at)
SELECT v.value ->> 'run_id', v.value ->> 'position', v.value ->> 'attempt', v.value ->> 'step',
    v.value ->> 'kind', v.value ->> 'status', v.value ->> 'final', v.value ->> 'compensable',
    v.value ->> 'fence', :worker_id, json(v.value -> 'output'), json(v.value -> 'error'),
    now() - (v.value ->> 'elapsed_s'), now(), v.value ->> 'workflow_attempt',
    v.value ->> 'seq', v.value ->> 'wake_s'
FROM json_each(:batch) v
WHERE EXISTS (SELECT 1 FROM {schema}_runs r
    WHERE r.id = v.value ->> 'run_id' AND r.fence = v.value ->> 'fence'
      AND r.worker_id = :worker_id AND r.lease_expires_at > now()
      AND (r.status = 'running' OR r.compensating))
ON CONFLICT (run_id, position, attempt) DO UPDATE SET
    status = excluded.status, final = excluded.final, compensable = excluded.compensable,
    output = excluded.output, error = excluded.error, finished_at = excluded.finished_at,
    seq = excluded.seq, wake_at = excluded.wake_at
WHERE {schema}_step_attempts.status <> 'completed'
RETURNING run_id, position, attempt,
    -- CAST: a bare column of RETURNING is compared without the index (a scan of runs).
    (SELECT r.status FROM {schema}_runs r WHERE r.id = CAST(run_id AS TEXT)) AS run_status;

-- name: abandon_wait
-- See the PostgreSQL twin: the wait ends canceled, a delivered signal goes back.
INSERT INTO {schema}_signals (namespace, name, data, run_id, buffered, given_back, created_at,
    expires_at)
SELECT r.namespace, a.signal, a.output, :run_id, 1, 1, now(), a.signal_expires_at
FROM {schema}_step_attempts a JOIN {schema}_runs r ON r.id = a.run_id
WHERE a.run_id = :run_id AND a.position = :position AND a.attempt = :attempt
  AND a.status = 'running' AND a.kind = 'signal-wait' AND a.delivered_at IS NOT NULL
  AND r.fence = :fence AND r.worker_id = :worker_id AND r.lease_expires_at > now()
  AND (r.status = 'running' OR r.compensating);
UPDATE {schema}_step_attempts SET status = 'canceled', finished_at = now(), delivered_at = NULL
WHERE run_id = :run_id AND position = :position AND attempt = :attempt AND status = 'running'
  AND EXISTS (SELECT 1 FROM {schema}_runs
    WHERE id = :run_id AND fence = :fence AND worker_id = :worker_id
      AND lease_expires_at > now() AND (status = 'running' OR compensating));
SELECT count(*) AS held FROM {schema}_runs
WHERE id = :run_id AND fence = :fence AND worker_id = :worker_id AND lease_expires_at > now();

-- name: upsert_queue
INSERT INTO {schema}_queues (name, concurrency, per_key, rate_limit, rate_period_s, priority,
    on_full, updated_at, declared_until)
VALUES (:name, :concurrency, :per_key, :rate_limit, :rate_period_s, :priority, :on_full,
    now(), now() + :ttl)
ON CONFLICT (name) DO UPDATE SET concurrency = excluded.concurrency,
    per_key = excluded.per_key, rate_limit = excluded.rate_limit,
    rate_period_s = excluded.rate_period_s, priority = excluded.priority,
    on_full = excluded.on_full, updated_at = now(),
    declared_until = max(coalesce({schema}_queues.declared_until, 0), excluded.declared_until)
RETURNING name;

-- name: renew_queues
UPDATE {schema}_queues SET declared_until = max(coalesce(declared_until, 0), now() + :ttl)
WHERE name IN (SELECT value FROM json_each(:names))
RETURNING name;

-- name: lock_queue
-- The claim's IMMEDIATE transaction already holds the database's write lock; the claiming
-- worker declares the queue (see the PostgreSQL twin).
UPDATE {schema}_queues SET declared_until = now() + :ttl
WHERE name = :queue AND (declared_until IS NULL OR declared_until < now() + :ttl / 2);
SELECT name FROM {schema}_queues WHERE name = :queue;

-- name: claim_queue
-- See the PostgreSQL twin: the room the queue has (counting every namespace's runs), its
-- due candidates of the namespace per served (workflow, version), and of those the first
-- that fit every limit.
UPDATE {schema}_runs SET
    fence = fence + 1,  -- worker_id: set last (see below)
    status = CASE WHEN status IN ('pending', 'waiting', 'held') THEN 'running' ELSE status END,
    error = CASE WHEN status = 'held' THEN NULL ELSE error END,  -- see hold_run
    attempts = max(attempts, 1),
    lease_expires_at = now() + :lease,
    available_at = now() + :lease,
    wake_requested = 0, waiting_for = NULL, wake_at = NULL,
    started_at = coalesce(started_at, now()),
    updated_at = now(),
    claim_token = :token,
    max_attempts = CASE WHEN max_attempts <> 0 THEN max_attempts ELSE (  -- as the twin's
        SELECT a.value FROM json_each(:workflows) w JOIN json_each(:versions) v
            ON w.key = v.key JOIN json_each(:max_attempts) a ON a.key = w.key
        WHERE w.value = {schema}_runs.workflow AND v.value = {schema}_runs.version) END
WHERE id IN (
    WITH busy AS (
        SELECT concurrency_key AS k, count(*) AS n FROM {schema}_runs
        WHERE queue = :queue AND (status = 'running' OR compensating) GROUP BY concurrency_key
    ), room AS (
        SELECT q.per_key,
            coalesce(q.concurrency - (SELECT coalesce(sum(n), 0) FROM busy), :limit) AS slots,
            coalesce(q.rate_limit - (SELECT count(*) FROM {schema}_runs s
                WHERE s.queue = :queue AND s.started_at IS NOT NULL
                  AND s.started_at > now() - q.rate_period_s), :limit) AS firsts
        FROM {schema}_queues q WHERE q.name = :queue
    ), cand AS (
        SELECT r.id, r.priority, r.available_at, r.concurrency_key, 1 AS takes,
            r.started_at IS NULL AS fresh
        FROM json_each(:workflows) w JOIN json_each(:versions) v ON w.key = v.key
        CROSS JOIN {schema}_runs r WHERE r.id IN (
            SELECT x.id FROM {schema}_runs x
            WHERE x.namespace = :namespace AND x.workflow = w.value AND x.version = v.value
              AND x.queue IS NOT NULL AND x.queue = :queue AND x.available_at <= now()
              AND x.status IN ('pending', 'waiting', 'held')
              AND x.id NOT IN (SELECT value FROM json_each(:held))  -- still executing here
              AND ((SELECT per_key FROM room) IS NULL OR x.concurrency_key IS NULL
                   OR coalesce((SELECT n FROM busy WHERE k = x.concurrency_key), 0)
                      < (SELECT per_key FROM room))
            ORDER BY x.priority DESC, x.available_at
            -- A full queue reads nothing of its backlog.
            LIMIT CASE WHEN (SELECT slots FROM room) > 0 THEN :scan ELSE 0 END)
        UNION ALL
        SELECT r.id, r.priority, r.available_at, r.concurrency_key, 0, 0
        FROM {schema}_runs r
        WHERE r.queue = :queue AND r.status IN ('running', 'canceled')
          AND +r.available_at <= now()  -- '+': read the queue's few, not every due run
          AND r.namespace = :namespace AND r.id NOT IN (SELECT value FROM json_each(:held))
          AND EXISTS (SELECT 1 FROM json_each(:workflows) w JOIN json_each(:versions) v
                      ON w.key = v.key WHERE w.value = r.workflow AND v.value = r.version)
    ), keyed AS (
        SELECT cand.*, row_number() OVER (PARTITION BY concurrency_key, takes
            ORDER BY priority DESC, available_at, id) AS key_rank
        FROM cand
    ), fitting AS (
        SELECT keyed.id, room.slots, room.firsts,
            sum(takes) OVER w AS used, sum(fresh) OVER w AS started, row_number() OVER w AS n
        FROM keyed, room
        WHERE room.per_key IS NULL OR concurrency_key IS NULL OR NOT takes
           OR key_rank + coalesce((SELECT n FROM busy WHERE k = concurrency_key), 0)
              <= room.per_key
        WINDOW w AS (ORDER BY priority DESC, available_at, id)
    )
    SELECT id FROM fitting WHERE used <= slots AND started <= firsts AND n <= :limit
);
UPDATE {schema}_step_attempts SET status = 'abandoned', finished_at = now()
WHERE status = 'running' AND kind IN ('function', 'transaction')
  AND run_id IN (SELECT id FROM {schema}_runs WHERE claim_token = :token);
SELECT r.*, now() AS db_now,
    (SELECT json_group_array(json_object(
        'position', position, 'attempt', attempt, 'step', step, 'kind', kind,
        'status', status, 'final', final, 'compensable', compensable, 'signal', signal,
        'child_run_id', child_run_id, 'wake_at', wake_at,
        'output', json(output), 'error', json(error),
        'workflow_attempt', workflow_attempt, 'seq', seq,
        'delivered', delivered_at IS NOT NULL))
     FROM (SELECT * FROM {schema}_step_attempts s WHERE s.run_id = r.id
           ORDER BY position, attempt)) AS history,
    -- Still the previous holder's, whose lease expired (a takeover; NULL: no worker held
    -- the run): the claimer's comes after it, and replaces it in the row.
    r.worker_id AS taken_from, :worker_id AS worker_id
FROM {schema}_runs r WHERE claim_token = :token;
UPDATE {schema}_runs SET worker_id = :worker_id, claim_token = NULL WHERE claim_token = :token;

-- name: foreign_queues
-- See the PostgreSQL twin.
SELECT q.name FROM {schema}_queues q
WHERE q.declared_until > now() AND q.name NOT IN (SELECT value FROM json_each(:mine))
  AND EXISTS (
    SELECT 1 FROM json_each(:workflows) w JOIN json_each(:versions) v ON w.key = v.key
    CROSS JOIN {schema}_runs r
    WHERE r.namespace = :namespace AND r.workflow = w.value AND r.version = v.value
      AND r.queue = q.name AND r.available_at <= now())
ORDER BY q.name;

-- name: queue_next
-- See the PostgreSQL twin.
SELECT (SELECT min(t) FROM (
    SELECT min(r.available_at) AS t
    FROM json_each(:workflows) w JOIN json_each(:versions) v ON w.key = v.key
    CROSS JOIN {schema}_runs r
    WHERE r.namespace = :namespace AND r.workflow = w.value AND r.version = v.value
      AND r.queue IS NOT NULL AND r.queue = :queue AND r.available_at > now()
    UNION ALL
    SELECT min(s.started_at + q.rate_period_s)
    FROM {schema}_queues q JOIN {schema}_runs s ON s.queue = q.name
    WHERE q.name = :queue AND q.rate_limit IS NOT NULL AND s.started_at IS NOT NULL
      AND s.started_at > now() - q.rate_period_s)) AS next_at, now() AS db_now;

-- name: queue_counts
SELECT q.name, q.concurrency, q.per_key, q.rate_limit, q.rate_period_s, q.priority,
    q.on_full,
    (SELECT count(*) FROM {schema}_runs r
     WHERE r.queue = q.name AND (r.status = 'running' OR r.compensating)) AS running,
    (SELECT count(*) FROM {schema}_runs r WHERE r.queue = q.name AND r.status = 'pending')
        AS waiting
FROM {schema}_queues q ORDER BY q.name;

-- name: lock_key
-- The IMMEDIATE transaction already holds the database's write lock (see PostgreSQL's).
SELECT 1 AS locked;

-- name: key_runs
-- See the PostgreSQL twin.
SELECT id, status, compensating, created_at FROM {schema}_runs
WHERE queue = :queue AND concurrency_key = :key AND id <> :id
  AND status IN ('pending', 'running', 'held', 'waiting')
  AND (status <> 'waiting' OR available_at <= now())
UNION
SELECT id, status, compensating, created_at FROM {schema}_runs
WHERE queue = :queue AND concurrency_key = :key AND id <> :id AND compensating
ORDER BY created_at DESC, id DESC;

-- name: refuse_run
-- See the PostgreSQL twin.
UPDATE {schema}_runs SET status = 'canceled', error = :error,
    finished_at = now(), updated_at = now(), fence = fence + 1, available_at = NULL
WHERE id = :id AND status = 'pending'
RETURNING *;

-- name: schedule_last_tick
-- As `last_tick_at`: a time, which the SQLite connector converts by its name.
SELECT last_tick AS last_tick_at FROM {schema}_schedules WHERE namespace = :namespace AND workflow = :workflow;

-- name: schedule_ticked
INSERT INTO {schema}_schedules (namespace, workflow, schedule, tz, last_tick, updated_at)
VALUES (:namespace, :workflow, :schedule, :tz, :tick, now())
ON CONFLICT (namespace, workflow) DO UPDATE SET schedule = excluded.schedule,
    tz = excluded.tz, updated_at = now(),
    last_tick = max(coalesce({schema}_schedules.last_tick, 0), excluded.last_tick)
RETURNING last_tick;

-- Operating runs (§4.18): resume, fork, events, signal housekeeping, retention.

-- name: resume_run
-- A failed or canceled run becomes due again as its next workflow attempt, listed in
-- `resumes`: replay keeps everything the run received, failures only where the code needs
-- them (see `_replay.History`), with the same number of workflow attempts still to spend. A deadline already passed no longer applies. A signal
-- delivered to a wait that ended unrecorded (the run was canceled or failed first) goes back
-- to the run's buffer, so the resumed run's wait receives it.
INSERT INTO {schema}_signals (namespace, name, data, run_id, buffered, given_back, created_at,
    expires_at)
SELECT r.namespace, a.signal, a.output, a.run_id, 1, 1, now(), a.signal_expires_at
FROM {schema}_step_attempts a JOIN {schema}_runs r ON r.id = a.run_id
WHERE a.run_id = :run_id AND a.kind = 'signal-wait' AND a.status <> 'completed'
  AND a.delivered_at IS NOT NULL AND r.status IN ('failed', 'canceled') AND NOT r.compensating;
UPDATE {schema}_step_attempts SET delivered_at = NULL
WHERE run_id = :run_id AND kind = 'signal-wait' AND status <> 'completed'
  AND delivered_at IS NOT NULL
  AND EXISTS (SELECT 1 FROM {schema}_runs r WHERE r.id = :run_id
              AND r.status IN ('failed', 'canceled') AND NOT r.compensating);
UPDATE {schema}_runs SET
    status = 'pending', attempts = attempts + 1, max_attempts = max_attempts + attempts,
        resumes = json_insert(resumes, '$[#]', attempts + 1),
    output = NULL, error = NULL, available_at = now(), finished_at = NULL,
    worker_id = NULL, lease_expires_at = NULL, wake_requested = 0,
    waiting_for = NULL, wake_at = NULL, compensating = 0,
    deadline_at = CASE WHEN deadline_at <= now() THEN NULL ELSE deadline_at END,
    updated_at = now()
WHERE id = :run_id AND status IN ('failed', 'canceled') AND NOT compensating
RETURNING *, 0 AS notified;

-- name: log_rows
SELECT id, position, attempt, step, kind, status, final, compensable, signal, child_run_id,
    wake_at, workflow_attempt, seq
FROM {schema}_step_attempts WHERE run_id = :run_id ORDER BY position, attempt;

-- name: copy_step
INSERT INTO {schema}_step_attempts (run_id, position, attempt, step, kind, status, final,
    compensable, fence, worker_id, signal, child_run_id, wake_at, output, error, started_at,
    finished_at, workflow_attempt, seq)
SELECT :new_run_id, position, attempt, step, kind, status, final, compensable, 0, worker_id,
    signal, child_run_id, wake_at, output, error, started_at, finished_at, 1, :seq
FROM {schema}_step_attempts WHERE id = :id
RETURNING id;

-- name: find_runs_by_prefix
SELECT id FROM {schema}_runs WHERE substr(id, 1, length(:prefix)) = :prefix ORDER BY id LIMIT 10;

-- name: set_event
INSERT INTO {schema}_step_attempts (run_id, position, attempt, step, kind, status, fence,
    worker_id, output, started_at, finished_at, workflow_attempt, seq)
SELECT :run_id, :position, :attempt, :step, 'event', 'completed', :fence, :worker_id,
    :output, now(), now(), :workflow_attempt, :seq
WHERE EXISTS (SELECT 1 FROM {schema}_runs
              WHERE id = :run_id AND fence = :fence AND worker_id = :worker_id
                AND lease_expires_at > now() AND status = 'running')
ON CONFLICT (run_id, position, attempt) DO NOTHING
RETURNING id, 0 AS notified;

-- name: get_event
SELECT output FROM {schema}_step_attempts
WHERE run_id = :run_id AND kind = 'event' AND step = :key AND status = 'completed'
ORDER BY id DESC LIMIT 1;

-- name: list_events
SELECT step AS key, output AS value, finished_at AS set_at FROM {schema}_step_attempts a
WHERE run_id = :run_id AND kind = 'event' AND status = 'completed'
  AND id = (SELECT max(b.id) FROM {schema}_step_attempts b
            WHERE b.run_id = a.run_id AND b.kind = 'event' AND b.step = a.step
              AND b.status = 'completed')
ORDER BY step;

-- name: set_attributes
-- See the PostgreSQL twin: the merge first, only while the lease holds and no record of
-- this attempt is there, then the record (one transaction: both or neither).
UPDATE {schema}_runs SET attributes = json_patch(coalesce(attributes, '{}'), :output)
WHERE id = :run_id AND fence = :fence AND worker_id = :worker_id
  AND lease_expires_at > now() AND status = 'running'
  AND NOT EXISTS (SELECT 1 FROM {schema}_step_attempts
                  WHERE run_id = :run_id AND position = :position AND attempt = :attempt);
INSERT INTO {schema}_step_attempts (run_id, position, attempt, step, kind, status, fence,
    worker_id, output, started_at, finished_at, workflow_attempt, seq)
SELECT :run_id, :position, :attempt, :step, 'attributes', 'completed', :fence, :worker_id,
    :output, now(), now(), :workflow_attempt, :seq
WHERE EXISTS (SELECT 1 FROM {schema}_runs
              WHERE id = :run_id AND fence = :fence AND worker_id = :worker_id
                AND lease_expires_at > now() AND status = 'running')
ON CONFLICT (run_id, position, attempt) DO NOTHING
RETURNING id, 1 AS merged;

-- name: list_signals
SELECT id, name, data, created_at, expires_at, consumed_by, buffered, delivered_to
FROM {schema}_signals
WHERE namespace = :namespace AND (:name IS NULL OR name = :name)
  AND (NOT :pending OR (buffered AND consumed_at IS NULL
                        AND (expires_at IS NULL OR expires_at > now())))
ORDER BY id
LIMIT :limit;

-- name: delete_signal
DELETE FROM {schema}_signals WHERE namespace = :namespace AND id = :id RETURNING id;

-- name: purge_pick
-- The next batch of finished runs to purge, oldest first; a child whose parent still runs
-- is kept (the parent may yet read its result).
SELECT r.id FROM {schema}_runs r
WHERE r.namespace = :namespace AND r.finished_at <= now() - :older_s
  AND r.status IN (SELECT value FROM json_each(:statuses)) AND NOT r.compensating
  AND (:workflow IS NULL OR r.workflow = :workflow)
  AND NOT EXISTS (SELECT 1 FROM {schema}_runs p WHERE p.id = r.parent_run_id
                  AND p.status IN ('pending', 'running', 'waiting', 'held'))
ORDER BY r.finished_at
LIMIT :batch;

-- name: purge_consumed
DELETE FROM {schema}_signals WHERE consumed_by IN (SELECT value FROM json_each(:ids))
RETURNING id;

-- name: purge_addressed
-- Signals left in a purged run's own buffer (addressed to it, or put back by a resume):
-- nothing can take them any more.
DELETE FROM {schema}_signals
WHERE run_id IN (SELECT value FROM json_each(:ids)) AND buffered AND consumed_at IS NULL
RETURNING id;

-- name: purge_runs
-- Their steps go with them (ON DELETE CASCADE).
DELETE FROM {schema}_runs WHERE id IN (SELECT value FROM json_each(:ids)) RETURNING id;

-- name: purge_signals
-- Signals no run will consume: delivered at send time (kept for their idempotency key),
-- or expired while buffered; older than the cut-off.
DELETE FROM {schema}_signals WHERE id IN (
    SELECT id FROM {schema}_signals
    WHERE namespace = :namespace AND consumed_at IS NULL
      AND ((NOT buffered AND created_at <= now() - :older_s)
           OR expires_at <= now() - :older_s)
    LIMIT :batch
)
RETURNING id;

-- name: take_maintenance
-- One holder of a periodic job at a time: taken when free or past `until`.
INSERT INTO {schema}_maintenance (name, holder, until)
VALUES (:name, :holder, now() + :every_s)
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, until = excluded.until
WHERE {schema}_maintenance.until <= now()
RETURNING holder;

-- ===== streams (§4.21) =====

-- name: stream_take
-- See the PostgreSQL twin; SQLite's one writer orders a write and a run's end.
INSERT INTO {schema}_streams AS s (run_id, key, next_offset)
SELECT :run_id, :key, 1
WHERE EXISTS (SELECT 1 FROM {schema}_runs
              WHERE id = :run_id AND fence = :fence AND worker_id = :worker_id
                AND lease_expires_at > now() AND status = 'running')
ON CONFLICT (run_id, key) DO UPDATE SET next_offset = s.next_offset + 1
    WHERE s.closed_at IS NULL
RETURNING next_offset - 1 AS "offset";

-- name: stream_put
INSERT INTO {schema}_stream_values (run_id, key, "offset", value)
VALUES (:run_id, :key, :offset, :value)
RETURNING "offset", 0 AS notified;

-- name: stream_step
INSERT INTO {schema}_step_attempts (run_id, position, attempt, step, kind, status, fence,
    worker_id, output, started_at, finished_at, workflow_attempt, seq)
SELECT :run_id, :position, :attempt, :step, 'stream', 'completed', :fence, :worker_id,
    :output, now(), now(), :workflow_attempt, :seq
WHERE EXISTS (SELECT 1 FROM {schema}_runs
              WHERE id = :run_id AND fence = :fence AND worker_id = :worker_id
                AND lease_expires_at > now() AND status = 'running')
ON CONFLICT (run_id, position, attempt) DO NOTHING
RETURNING id;

-- name: stream_close
INSERT INTO {schema}_streams AS s (run_id, key, closed_at)
SELECT :run_id, :key, now()
WHERE EXISTS (SELECT 1 FROM {schema}_runs
              WHERE id = :run_id AND fence = :fence AND worker_id = :worker_id
                AND lease_expires_at > now() AND status = 'running')
ON CONFLICT (run_id, key) DO UPDATE SET closed_at = coalesce(s.closed_at, now())
RETURNING run_id, 0 AS notified;

-- name: stream_state
SELECT r.status, s.closed_at IS NOT NULL AS closed
FROM {schema}_runs r LEFT JOIN {schema}_streams s ON s.run_id = r.id AND s.key = :key
WHERE r.id = :run_id;

-- name: stream_poll
-- A reader's look: the stream's state and its values from :from_offset, in one statement,
-- so in one snapshot: a stream closed (or a run ended) in it has all its values in it.
SELECT r.status, s.closed_at IS NOT NULL AS closed, v."offset", v.value
FROM {schema}_runs r
LEFT JOIN {schema}_streams s ON s.run_id = r.id AND s.key = :key
LEFT JOIN (SELECT "offset", value FROM {schema}_stream_values
           WHERE run_id = :run_id AND key = :key AND "offset" >= :from_offset
           ORDER BY "offset" LIMIT :limit) v ON true
WHERE r.id = :run_id
ORDER BY v."offset";

-- name: stream_read
SELECT "offset", value FROM {schema}_stream_values
WHERE run_id = :run_id AND key = :key AND "offset" >= :from_offset
ORDER BY "offset" LIMIT :limit;

-- name: stream_list
SELECT key, next_offset AS length, closed_at IS NOT NULL AS closed FROM {schema}_streams
WHERE run_id = :run_id ORDER BY key;
-- ===== requests =====
-- Requests with answers (SPEC §4.22, store/requests.py).

-- name: find_request
SELECT id FROM {schema}_requests WHERE run_id = :run_id AND idempotency_key = :idempotency_key;

-- name: insert_request
INSERT INTO {schema}_requests (id, run_id, name, idempotency_key)
VALUES (:id, :run_id, :name, :idempotency_key);

-- name: get_request
SELECT id, run_id, name, status, answer, reason FROM {schema}_requests WHERE id = :id;

-- name: answer_request
UPDATE {schema}_requests
SET status = :status, answer = :answer, reason = :reason, answered_at = now()
WHERE id = :id AND run_id = :run_id AND status = 'pending'
RETURNING 1 AS notified;
-- ===== continue-as-new =====
-- See the PostgreSQL twin: after finish_run ended the run `continued`, in its transaction.

-- name: continue_key
UPDATE {schema}_runs SET idempotency_key = NULL
WHERE id = :run_id AND status = 'continued' AND idempotency_key IS NOT NULL;

-- name: continue_run
INSERT INTO {schema}_runs (id, namespace, workflow, version, status, input, idempotency_key,
    max_attempts, available_at, deadline_at, parent_run_id, trace_context, parent_close,
    created_at, updated_at, queue, concurrency_key, priority, continued_from, chain_root,
    attributes)
SELECT :next_id, o.namespace, o.workflow, o.version, 'pending', :input, :idempotency_key,
    o.max_attempts, min(now(), coalesce(o.deadline_at, now())), o.deadline_at,
    o.parent_run_id, o.trace_context, o.parent_close, now(), now(), o.queue,
    o.concurrency_key, o.priority, o.id, coalesce(o.chain_root, o.id), o.attributes
FROM {schema}_runs o WHERE o.id = :run_id AND o.status = 'continued';
UPDATE {schema}_signals SET run_id = :next_id
WHERE run_id = :run_id AND buffered AND consumed_at IS NULL
  AND EXISTS (SELECT 1 FROM {schema}_runs WHERE id = :next_id);
INSERT INTO {schema}_signals (namespace, name, data, run_id, buffered, given_back, created_at,
    expires_at)
SELECT r.namespace, a.signal, a.output, :next_id, 1, 1, now(), a.signal_expires_at
FROM {schema}_step_attempts a JOIN {schema}_runs r ON r.id = :next_id
WHERE a.run_id = :run_id AND a.kind = 'signal-wait' AND a.status = 'canceled'
  AND a.delivered_at IS NOT NULL;
UPDATE {schema}_step_attempts SET delivered_at = NULL
WHERE run_id = :run_id AND kind = 'signal-wait' AND status = 'canceled'
  AND delivered_at IS NOT NULL AND EXISTS (SELECT 1 FROM {schema}_runs WHERE id = :next_id);
SELECT id, 0 AS signals, 0 AS notified FROM {schema}_runs WHERE id = :next_id;

-- name: continue_requests
-- See the PostgreSQL twin.
INSERT INTO {schema}_signals (namespace, name, data, run_id, buffered, given_back, created_at)
SELECT r.namespace, a.signal, a.output, :next_id, 1, 1, now()
FROM {schema}_step_attempts a JOIN {schema}_runs r ON r.id = :next_id
WHERE a.run_id = :run_id AND a.kind = 'signal-wait' AND a.status = 'completed'
  AND substr(a.signal, 1, length(:prefix)) = :prefix
  AND EXISTS (SELECT 1 FROM {schema}_requests q
              WHERE q.run_id = :run_id AND q.status = 'pending'
                AND q.id = json_extract(a.output, '$.id'))
ORDER BY a.seq;
UPDATE {schema}_requests SET run_id = :next_id WHERE run_id = :run_id AND status = 'pending';
