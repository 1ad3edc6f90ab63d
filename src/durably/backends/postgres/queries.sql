-- Named queries of the PostgreSQL backend. `{schema}` is the validated schema identifier,
-- `:name` a parameter. JSON goes in and comes out as text; the engine encodes and decodes.
-- A "fenced" query writes only while (run_id, fence, worker_id) still holds a live lease;
-- it takes FOR KEY SHARE on the run row so that no claim (FOR UPDATE) can bump the fence
-- before it commits, while heartbeats and cancels (plain updates) are not held up by it.
-- A `step.transaction` takes that lock only at its end, with the step's record (see
-- body_lease): a claim is never held up by a body that runs, or by its frozen worker.
-- A run looked up by its id (a lease, a parent) has its status tested as
-- `(status = 'running') IS TRUE`: the same test, but not one runs_status can serve. With
-- statistics from before a burst of runs started, the planner took that index for a
-- "rare" status and read every running run.
-- The engine's statements are prepared and planned once, generically (see the connector);
-- `-- plan: each call` marks the few whose plan depends on their parameters (optional
-- filters, cut-off times): they are planned with them every time.
-- Such a plan outlives the table sizes it was made for: rows that a statement found in
-- one of its CTEs are looked up from an array of their ids (`= ANY(ARRAY(...))`), not
-- joined: a join planned on a fresh schema read a whole index on every call once the table
-- had grown (issue 26 item 15; the connector also turns seq scans off for the same reason).

-- name: insert_run
WITH ins AS (
    INSERT INTO {schema}.runs (id, namespace, workflow, version, status, input, idempotency_key,
        max_attempts, available_at, deadline_at, parent_run_id, trace_context, parent_close,
        queue, concurrency_key, priority, attributes)
    VALUES (:id, :namespace, :workflow, :version, 'pending', CAST(:input AS json),
        :idempotency_key, :max_attempts,
        LEAST(COALESCE(CAST(:available_at AS timestamptz), now()), CAST(:deadline_at AS timestamptz)),
        :deadline_at, :parent_run_id, CAST(:trace_context AS jsonb), :parent_close,
        :queue, :concurrency_key, :priority, CAST(:attributes AS jsonb))
    ON CONFLICT DO NOTHING
    RETURNING *
), queued AS (
    -- A queue has a row from its first run on (see 0008): "no worker declares it" is read
    -- from that row. An existing row is left alone (no lock, no write).
    INSERT INTO {schema}.queues (name) SELECT :queue WHERE CAST(:queue AS text) IS NOT NULL
    ON CONFLICT (name) DO NOTHING
), notified AS (
    SELECT pg_notify(:channel, 'run') FROM ins WHERE ins.available_at <= now()
)
SELECT ins.*, (SELECT count(*) FROM notified) AS notified FROM ins;

-- name: debounce_run
-- A debounced start (SPEC §4.23, see 0025): a new run opens its key's window, unless the
-- key has a run pending that no worker ever claimed (runs_debounce, the arbiter): then
-- that run takes this start's input and options, and its due time is pushed back to the
-- one this start proposes (:debounce_s from now, or its deadline if sooner), never past
-- its window's cap (`debounce_max_at`, set by the start that opened it). The database decides which start opens a window and
-- which join it: a start racing another waits for its insert; one racing a claim waits for
-- the claim's lock and, once the claimed run has left the index, inserts (a new window).
-- The id returned is :id when this start opened the window. A new window notifies the
-- workers although it is not due yet: an idle worker sets its timer by it.
WITH ins AS (
    INSERT INTO {schema}.runs AS r (id, namespace, workflow, version, status, input,
        max_attempts, available_at, deadline_at, trace_context, queue, concurrency_key,
        priority, debounce_key, debounce_max_at, attributes)
    VALUES (:id, :namespace, :workflow, :version, 'pending', CAST(:input AS json),
        :max_attempts,
        LEAST(now() + CAST(:debounce_s AS float8) * interval '1 second',
              now() + CAST(:debounce_max_s AS float8) * interval '1 second',
              CAST(:deadline_at AS timestamptz)),
        :deadline_at, CAST(:trace_context AS jsonb), :queue, :concurrency_key, :priority,
        :debounce_key, now() + CAST(:debounce_max_s AS float8) * interval '1 second',
        CAST(:attributes AS jsonb))
    ON CONFLICT (namespace, workflow, debounce_key)
        WHERE debounce_key IS NOT NULL AND status = 'pending' AND fence = 0
    DO UPDATE SET input = EXCLUDED.input, version = EXCLUDED.version,
        max_attempts = EXCLUDED.max_attempts, deadline_at = EXCLUDED.deadline_at,
        queue = EXCLUDED.queue, concurrency_key = EXCLUDED.concurrency_key,
        priority = EXCLUDED.priority,
        -- a join's search attributes merge into the run's, as set_attributes does
        attributes = CASE WHEN EXCLUDED.attributes IS NULL THEN r.attributes
                          ELSE COALESCE(r.attributes, jsonb_build_object()) || EXCLUDED.attributes END,
        available_at = LEAST(EXCLUDED.available_at, r.debounce_max_at),
        updated_at = now()
    RETURNING r.*
), queued AS (
    INSERT INTO {schema}.queues (name) SELECT :queue WHERE CAST(:queue AS text) IS NOT NULL
    ON CONFLICT (name) DO NOTHING
), notified AS (
    SELECT pg_notify(:channel, 'run') FROM ins WHERE ins.id = :id
)
SELECT ins.*, (SELECT count(*) FROM notified) AS notified FROM ins;

-- name: get_run_by_key
SELECT * FROM {schema}.runs
WHERE namespace = :namespace AND workflow = :workflow AND idempotency_key = :idempotency_key;

-- name: get_run
SELECT * FROM {schema}.runs WHERE id = :run_id;

-- name: ended_runs
-- Which of these runs have ended (`RunHandle.wait` checks its waiters' runs at once).
SELECT id FROM {schema}.runs
WHERE id = ANY(CAST(:ids AS text[])) AND status IN ('continued', 'completed', 'failed', 'canceled')
  AND NOT compensating;

-- name: await_runs
-- Waiters (`RunHandle.wait`) mark their runs awaited before they rely on being told of the
-- end: an end notifies `ended:` only when the row it ended says awaited (finish_run,
-- finish_many). The ids returned are the runs marked, not ended (as ended_runs means it);
-- any other has ended, or does not exist: its waiter reads it.
-- No end is missed, in either order, under READ COMMITTED: the mark and the end both update
-- the run's row, so they hold its row lock one after the other, and an UPDATE writes the
-- row's latest committed version, its WHERE tested again on that version.
-- - The mark commits first: the end's UPDATE writes over the marked version, and its
--   RETURNING says awaited (also when its snapshot is older than the mark: the update, and
--   finish_many's lock before it, follow the row to its latest version).
-- - The end takes the row first: the mark waits for it to commit, then finds the run ended
--   and marks nothing; the waiter reads the end.
-- A mark held while a claim looks for due runs makes the claim pass over the run (SKIP
-- LOCKED): a marked run that is due wakes the workers again. The mark stays: an end after a
-- resume notifies too (for nothing, if nobody waits then).
WITH marked AS (
    UPDATE {schema}.runs SET awaited = true
    WHERE id = ANY(CAST(:ids AS text[]))
      AND (status NOT IN ('continued', 'completed', 'failed', 'canceled') OR compensating)
    RETURNING id, available_at
), notified AS (
    SELECT pg_notify(:channel, 'run') FROM (
        SELECT 1 FROM marked WHERE available_at <= now() LIMIT 1) AS x
)
SELECT id, (SELECT count(*) FROM notified) AS notified FROM marked;

-- name: get_run_for_update
SELECT * FROM {schema}.runs WHERE id = :run_id FOR NO KEY UPDATE;

-- name: list_runs
-- plan: each call
SELECT * FROM {schema}.runs
WHERE (CAST(:status AS text) IS NULL OR status = :status)
  AND (CAST(:workflow AS text) IS NULL OR workflow = :workflow)
  AND (CAST(:queue AS text) IS NULL OR queue = :queue)
  AND (CAST(:due_before AS timestamptz) IS NULL
       OR (available_at <= :due_before AND status IN ('pending', 'waiting', 'running')))
  AND (CAST(:created_after AS timestamptz) IS NULL OR created_at >= :created_after)
  AND (CAST(:namespace AS text) IS NULL OR namespace = :namespace)
  AND (CAST(:idempotency_key AS text) IS NULL OR idempotency_key = :idempotency_key)
  -- Search attributes (0027): planned with the value, so runs_attributes (GIN) serves it.
  AND (CAST(:attributes AS jsonb) IS NULL OR attributes @> CAST(:attributes AS jsonb))
ORDER BY created_at DESC, id
LIMIT :limit OFFSET :offset;

-- name: list_due
-- plan: each call
SELECT * FROM {schema}.runs
WHERE available_at <= now() AND status IN ('pending', 'waiting', 'running')
ORDER BY available_at
LIMIT :limit;

-- name: list_steps
SELECT s.*, s.id AS attempt_id FROM {schema}.step_attempts s
WHERE run_id = :run_id ORDER BY started_at, id;

-- name: claim
-- The due runs of each (workflow, version) the worker serves, in its app's namespace,
-- oldest first, read from one range of runs_due_in_namespace per pair: runs of versions
-- no worker here serves, or of other namespaces, are never read. Each pair's candidates
-- are locked as they are read, passing over those another worker holds (so the next of
-- that pair are taken instead); the oldest :limit of them all are claimed (the few locked
-- beyond are free again when this statement ends).
-- Runs of a queue that no worker declares (`lapsed`: renamed or removed in a deploy) are
-- unqueued runs too, read from one range of runs_queued_in_namespace per pair and lapsed
-- queue (none in the common case: then nothing of it is read). The lapsed rows are locked
-- FOR SHARE, in name order: a worker declaring the queue (lock_queue, renew_queues) waits
-- for this claim to commit, so its next queued claim counts these runs; and a claim that
-- waits for a declaration in flight re-reads the row after it and passes over a queue that
-- is declared again. So no claim of a declared queue's run ever ignores its limits.
-- A run the worker still executes (`:held`) is not claimed again: see below.
-- The claim commits without waiting for its WAL flush (`synchronous_commit` off for this
-- statement alone): about a third of a signal's wake-up was this flush. A crash may lose
-- the claim: the run is then as before it, due, and its next claim takes the same fence
-- number. So the number must not leave the engine before the claim is durable: a body that
-- gets it (a `StepContext`) waits for a heartbeat of its batch (`Store.confirm_claims`),
-- whose commit flushes the WAL through the claim. And two executions in one worker
-- must never hold the same (fence, worker): the lost claim's execution still runs, so its
-- worker passes over the run until it has ended. Every other write under the lease waits
-- for its own flush, which is later in the WAL than the claim's.
-- Each run's history is read once the run is locked, by a function (0012) that also marks
-- the previous holder's attempts still running abandoned: the statement's own snapshot is
-- older than its locks, and would miss what was committed for the run in between (a
-- signal, the previous holder's last record or last attempt begun).
-- A run a thin client started by name (version '', max_attempts 0: `records.NEWEST`) is
-- read through the worker's pair (name, '') and bound here, in the claim's own write, to
-- the pair's `binds` version and `max_attempts` (SET reads the row as it was).
-- `taken_from`: the worker whose lease on the run expired (a takeover), as the lock read
-- it; NULL when no worker held the run (new, parked, released or retried).
WITH quick AS MATERIALIZED (
    SELECT set_config('synchronous_commit', 'off', true)
), lapsed AS MATERIALIZED (
    SELECT q.name FROM {schema}.queues q
    WHERE q.declared_until IS NULL OR q.declared_until <= now()
    ORDER BY q.name
    FOR SHARE
), pairs AS (
    SELECT * FROM unnest(CAST(:workflows AS text[]), CAST(:versions AS text[]),
                         CAST(:binds AS text[]), CAST(:max_attempts AS integer[]))
        AS p(workflow, version, binds, max_attempts)
), cand AS (
    SELECT c.id, c.available_at, c.worker_id FROM pairs p
    CROSS JOIN LATERAL (
        SELECT r.id, r.available_at, r.worker_id FROM {schema}.runs r
        WHERE r.namespace = :namespace AND r.workflow = p.workflow AND r.version = p.version
          AND r.available_at <= now() AND r.queue IS NULL  -- queued runs: claim_queue
          AND r.id <> ALL(CAST(:held AS text[]))
        ORDER BY r.available_at
        LIMIT :limit
        FOR UPDATE SKIP LOCKED
    ) c
    UNION ALL
    SELECT o.id, o.available_at, o.worker_id FROM pairs p CROSS JOIN lapsed
    CROSS JOIN LATERAL (
        SELECT r.id, r.available_at, r.worker_id FROM {schema}.runs r
        WHERE r.namespace = :namespace AND r.workflow = p.workflow AND r.version = p.version
          AND r.queue = lapsed.name AND r.available_at <= now()
          AND r.id <> ALL(CAST(:held AS text[]))
        ORDER BY r.priority DESC, r.available_at
        LIMIT :limit
        FOR UPDATE SKIP LOCKED
    ) o
), due AS (
    SELECT cand.id, cand.worker_id FROM cand ORDER BY cand.available_at LIMIT :limit
), claimed AS (
    UPDATE {schema}.runs r SET
        fence = r.fence + 1,
        worker_id = :worker_id,
        status = CASE WHEN r.status IN ('pending', 'waiting', 'held') THEN 'running' ELSE r.status END,
        error = CASE WHEN r.status = 'held' THEN NULL ELSE r.error END,  -- see hold_run
        attempts = GREATEST(r.attempts, 1),
        lease_expires_at = now() + :lease * interval '1 second',
        available_at = now() + :lease * interval '1 second',
        wake_requested = false, waiting_for = NULL, wake_at = NULL,
        started_at = COALESCE(r.started_at, now()),
        updated_at = now(),
        version = CASE WHEN r.version <> '' THEN r.version ELSE (SELECT p.binds FROM pairs p
            WHERE p.workflow = r.workflow AND p.version = '') END,
        max_attempts = CASE WHEN r.max_attempts <> 0 THEN r.max_attempts ELSE (
            SELECT p.max_attempts FROM pairs p
            WHERE p.workflow = r.workflow AND p.version = r.version) END
    -- By id, from an array: whatever the planner counts of `due` (a tenth of its input, for
    -- a LIMIT it cannot see in a generic plan), the runs are looked up, never all read.
    WHERE r.id = ANY(ARRAY(SELECT id FROM due))
    RETURNING r.*
)
SELECT claimed.*, now() AS db_now,
    {schema}.claimed_history(claimed.id) AS history,  -- read once the run is locked (0012)
    (SELECT due.worker_id FROM due WHERE due.id = claimed.id) AS taken_from
FROM claimed CROSS JOIN quick;

-- name: next_due
-- When the unqueued claim may next find a run of the namespace: one look into
-- runs_due_in_namespace per served pair, and one into runs_queued_in_namespace per pair
-- and queue no worker declares (`lapsed`: its runs are unqueued runs, see claim). No pairs: one row, next_at NULL.
WITH pairs AS (
    SELECT * FROM unnest(CAST(:workflows AS text[]), CAST(:versions AS text[]))
        AS p(workflow, version)
), lapsed AS (
    SELECT q.name FROM {schema}.queues q
    WHERE q.declared_until IS NULL OR q.declared_until <= now()
)
SELECT LEAST(
    (SELECT min(n.next_at) FROM pairs p CROSS JOIN LATERAL (
        SELECT min(r.available_at) AS next_at FROM {schema}.runs r
        WHERE r.namespace = :namespace AND r.workflow = p.workflow AND r.version = p.version
          AND r.available_at IS NOT NULL AND r.queue IS NULL) n),
    (SELECT min(o.next_at) FROM pairs p CROSS JOIN lapsed CROSS JOIN LATERAL (
        SELECT min(r.available_at) AS next_at FROM {schema}.runs r
        WHERE r.namespace = :namespace AND r.workflow = p.workflow AND r.version = p.version
          AND r.queue = lapsed.name AND r.available_at IS NOT NULL) o)
) AS next_at, now() AS db_now;

-- name: heartbeat
-- Rows are locked in id order, as the group commit locks them: no deadlock between them.
-- `confirm_claims` is its twin for runs just claimed (the connector runs this one on the
-- connection kept for lease renewals, that one on the engine's).
WITH held AS (
    SELECT r.id FROM {schema}.runs r
    JOIN unnest(CAST(:ids AS text[]), CAST(:fences AS bigint[])) AS h(id, fence)
      ON r.id = h.id AND r.fence = h.fence
    WHERE r.worker_id = :worker_id AND r.lease_expires_at > now()
      AND (r.status = 'running' OR r.compensating)
    ORDER BY r.id
    FOR NO KEY UPDATE
)
UPDATE {schema}.runs r SET
    lease_expires_at = now() + :lease * interval '1 second',
    available_at = now() + :lease * interval '1 second'
FROM held WHERE r.id = held.id
RETURNING r.id, r.status, r.wake_requested;

-- name: confirm_claims
-- A heartbeat of runs just claimed (see claim), on the engine's connections (not the one
-- kept for lease renewals): its commit flushes the WAL through their claim, even where
-- the server's default is not to wait (`synchronous_commit` on for it), so that their fence
-- may leave the engine. The ids still held.
WITH sync AS MATERIALIZED (
    SELECT set_config('synchronous_commit', 'on', true)
), held AS (
    SELECT r.id FROM {schema}.runs r
    JOIN unnest(CAST(:ids AS text[]), CAST(:fences AS bigint[])) AS h(id, fence)
      ON r.id = h.id AND r.fence = h.fence
    WHERE r.worker_id = :worker_id AND r.lease_expires_at > now()
      AND (r.status = 'running' OR r.compensating)
    ORDER BY r.id
    FOR NO KEY UPDATE
)
UPDATE {schema}.runs r SET
    lease_expires_at = now() + :lease * interval '1 second',
    available_at = now() + :lease * interval '1 second'
FROM held CROSS JOIN sync WHERE r.id = held.id
RETURNING r.id;

-- name: check_lease
SELECT now() AS db_now FROM {schema}.runs
WHERE id = :run_id AND fence = :fence AND worker_id = :worker_id
  AND lease_expires_at > now() AND (status = 'running' OR compensating)
FOR KEY SHARE;

-- name: body_lease
-- The lease check that opens a `step.transaction` body's transaction. It locks nothing:
-- a claim passes over a run it cannot lock (SKIP LOCKED), and a worker frozen or cut off
-- inside the body would hold up every takeover of its run for as long as the server keeps
-- the session (a partition: until TCP keepalives give up, hours by default). The fence is
-- checked again, under the lock, by the step's record at the end (record_finish): a run
-- taken over while the body ran fails it (LeaseLostError), and the body's writes roll back.
-- And the server ends the transaction once it has been idle for a lease (`:idle_ms`: its
-- worker frozen or cut off, or a body that waits that long on something else): no row the
-- body locked is held from the worker that took over for longer than that.
SELECT now() AS db_now,
    set_config('idle_in_transaction_session_timeout', CAST(:idle_ms AS text), true) AS idle
FROM {schema}.runs
WHERE id = :run_id AND fence = :fence AND worker_id = :worker_id
  AND lease_expires_at > now() AND (status = 'running' OR compensating);

-- name: record_start
WITH lease AS (
    SELECT 1 FROM {schema}.runs
    WHERE id = :run_id AND fence = :fence AND worker_id = :worker_id
      AND lease_expires_at > now()
      AND (status = 'running' OR (compensating AND CAST(:position AS integer) < 0))
    FOR KEY SHARE
)
INSERT INTO {schema}.step_attempts (run_id, position, attempt, step, kind, status, fence,
    worker_id, signal, child_run_id, wake_at, workflow_attempt)
SELECT :run_id, :position, :attempt, :step, :kind, 'running', :fence, :worker_id, :signal,
    :child_run_id, now() + CAST(:wait_s AS float8) * interval '1 second', :workflow_attempt
FROM lease
ON CONFLICT (run_id, position, attempt) DO NOTHING
RETURNING wake_at;

-- name: record_finish
-- A completed record is never overwritten: a late failure or cancel of the same attempt
-- (e.g. after a lost COMMIT reply) leaves it alone and returns nothing. A `:signal` is one
-- a wait took from the buffer at once: delivered to it now.
WITH lease AS (
    SELECT 1 FROM {schema}.runs
    WHERE id = :run_id AND fence = :fence AND worker_id = :worker_id
      AND lease_expires_at > now() AND (status = 'running' OR compensating)
    FOR KEY SHARE
)
INSERT INTO {schema}.step_attempts (run_id, position, attempt, step, kind, status, final,
    compensable, fence, worker_id, output, error, started_at, finished_at, workflow_attempt,
    seq, wake_at, signal, delivered_at, signal_expires_at)
SELECT :run_id, :position, :attempt, :step, :kind, :status, :final, :compensable, :fence,
    :worker_id, CAST(:output AS json), CAST(:error AS jsonb),
    now() - CAST(:elapsed_s AS float8) * interval '1 second', now(), :workflow_attempt,
    :seq, CAST(:wake_at AS timestamptz), CAST(:signal AS text),
    CASE WHEN CAST(:signal AS text) IS NOT NULL THEN now() END,
    CAST(:signal_expires_at AS timestamptz)
FROM lease
ON CONFLICT (run_id, position, attempt) DO UPDATE SET
    status = excluded.status, final = excluded.final, compensable = excluded.compensable,
    output = excluded.output, error = excluded.error, finished_at = excluded.finished_at,
    seq = excluded.seq, wake_at = excluded.wake_at
WHERE {schema}.step_attempts.status <> 'completed'
RETURNING id;

-- name: get_attempt
SELECT * FROM {schema}.step_attempts
WHERE run_id = :run_id AND position = :position AND attempt = :attempt;

-- name: resolve_wait
-- End a wait as the next entry of the run's log. A signal already delivered to it keeps
-- its data (a timeout that raced it loses); the stored output is returned, and whether a
-- signal was delivered (a timeout stores null, as a signal of null data does).
WITH lease AS (
    SELECT 1 FROM {schema}.runs
    WHERE id = :run_id AND fence = :fence AND worker_id = :worker_id
      AND lease_expires_at > now() AND (status = 'running' OR compensating)
    FOR KEY SHARE
)
UPDATE {schema}.step_attempts SET
    status = CASE WHEN delivered_at IS NOT NULL THEN 'completed' ELSE :status END,
    final = (delivered_at IS NULL AND :status = 'failed'),
    output = CASE WHEN delivered_at IS NOT NULL THEN output ELSE CAST(:output AS json) END,
    error = CASE WHEN delivered_at IS NOT NULL THEN NULL ELSE CAST(:error AS jsonb) END,
    seq = :seq, finished_at = now()
WHERE run_id = :run_id AND position = :position AND attempt = :attempt AND status = 'running'
  AND EXISTS (SELECT 1 FROM lease)
RETURNING status, output::text AS output, error::text AS error,
    delivered_at IS NOT NULL AS delivered;

-- name: park
UPDATE {schema}.runs SET
    status = CASE WHEN wake_requested THEN 'pending' ELSE :status END,
    available_at = CASE WHEN wake_requested THEN now()
                        ELSE LEAST(CAST(:wake_at AS timestamptz), deadline_at) END,
    wake_at = :wake_at, waiting_for = :waiting_for, error = CAST(:error AS jsonb),
    parked_on = CAST(:parked_on AS text[]), parked_fence = fence,
    wake_requested = false, worker_id = NULL, lease_expires_at = NULL, holds = 0,
    updated_at = now()
WHERE id = :run_id AND fence = :fence AND worker_id = :worker_id
  AND lease_expires_at > now() AND (status = 'running') IS TRUE
RETURNING available_at;

-- name: release
UPDATE {schema}.runs SET
    status = CASE WHEN status = 'running' THEN 'pending' ELSE status END,
    available_at = now(), worker_id = NULL, lease_expires_at = NULL, updated_at = now()
WHERE id = :run_id AND fence = :fence AND worker_id = :worker_id
RETURNING id;

-- name: hold_run
-- A replay that did not match the run's history (SPEC §4.2): the run is let go of as it is
-- (its waits, its children, its attempts), `held`, claimable again after `:delay_s`. Its
-- deadline does not bring that forward: a deadline passed is enforced (with the undos) by
-- the claim of code that matches, never by the code that cannot replay it. A canceled run
-- whose undos the code could not replay (canceled before this claim, or during it) stays
-- canceled, with the cancel's error, still to be compensated. The hold's error is the
-- run's until a claim takes it.
UPDATE {schema}.runs SET
    status = CASE WHEN status = 'running' THEN 'held' ELSE status END,
    error = CASE WHEN status = 'running' THEN CAST(:error AS jsonb) ELSE error END,
    holds = holds + 1,
    available_at = now() + :delay_s * interval '1 second',
    wake_requested = false, worker_id = NULL, lease_expires_at = NULL, updated_at = now()
WHERE id = :run_id AND fence = :fence AND worker_id = :worker_id
  AND lease_expires_at > now() AND (status = 'running' OR compensating)
RETURNING available_at;

-- name: retry_run
UPDATE {schema}.runs SET
    status = 'pending', attempts = attempts + 1, error = CAST(:error AS jsonb),
    available_at = LEAST(now() + :delay_s * interval '1 second', deadline_at),
    worker_id = NULL, lease_expires_at = NULL, holds = 0, updated_at = now()
WHERE id = :run_id AND fence = :fence AND worker_id = :worker_id
  AND lease_expires_at > now() AND (status = 'running') IS TRUE
RETURNING id;

-- name: give_back_signal
-- A signal wait that ended, but whose signal the workflow will not receive (the workflow
-- stopped awaiting it, or a workflow retry's cut drops it): the signal goes back to the
-- run's own buffer, once. A wait holds a signal while `delivered_at` is set (when one was
-- delivered to it or it took one from the buffer; a wait that timed out holds none): it is
-- cleared here, as `abandon_wait` clears it. The wait is named by its place in the log.
-- The signal keeps the expiry it was sent with (see 0017).
-- In an execution, `deliver_buffered` follows in the same transaction (see `Store`).
WITH lease AS (
    SELECT namespace FROM {schema}.runs
    WHERE id = :run_id AND fence = :fence AND worker_id = :worker_id
      AND lease_expires_at > now() AND (status = 'running') IS TRUE
    FOR KEY SHARE
), gone AS (
    UPDATE {schema}.step_attempts a SET delivered_at = NULL
    WHERE a.run_id = :run_id AND a.position = :position AND a.seq = :seq
      AND a.kind = 'signal-wait' AND a.status = 'completed' AND a.delivered_at IS NOT NULL
      AND EXISTS (SELECT 1 FROM lease)
    RETURNING a.signal, a.output, a.signal_expires_at
), back AS (
    INSERT INTO {schema}.signals (namespace, name, data, run_id, buffered, given_back,
        expires_at)
    SELECT lease.namespace, gone.signal, gone.output, :run_id, true, true,
        gone.signal_expires_at
    FROM gone, lease
    RETURNING id
)
SELECT (SELECT count(*) FROM lease) AS held, (SELECT count(*) FROM back) AS returned;

-- name: finish_run
-- The run's end. Step records not yet durable ride along (`:batch`, as for record_many;
-- written only if the fenced update of the run happened, never over a completed one).
-- Whatever else is still `running` (a wait, a body interrupted by the end) is canceled,
-- so a finished run has no attempt left running. A cancel's error is kept. The run and its
-- parent are locked in id order before either is updated (see lock_tree).
WITH v AS (
    SELECT * FROM json_to_recordset(CAST(:batch AS json)) AS v(run_id text, fence bigint,
        position integer, attempt integer, step text, kind text, status text, final boolean,
        output json, error jsonb, compensable boolean, elapsed_s float8,
        workflow_attempt integer, seq integer, wake_s float8)
), locked AS MATERIALIZED (
    SELECT r.id FROM {schema}.runs r
    WHERE r.id = :run_id
       OR r.id = (SELECT c.parent_run_id FROM {schema}.runs c WHERE c.id = :run_id)
    ORDER BY r.id
    FOR NO KEY UPDATE
), done AS (
    UPDATE {schema}.runs SET
        status = :status, output = CAST(:output AS json),
        error = COALESCE(CAST(:error AS jsonb), error),
        available_at = NULL, worker_id = NULL, lease_expires_at = NULL, compensating = false,
        finished_at = COALESCE(finished_at, now()), updated_at = now()
    WHERE id = :run_id AND id IN (SELECT id FROM locked) AND fence = :fence AND worker_id = :worker_id
      AND lease_expires_at > now() AND (status = 'running' OR compensating)
      AND (status <> 'canceled' OR :status = 'canceled')
    RETURNING id, parent_run_id, awaited
), records AS (
    INSERT INTO {schema}.step_attempts (run_id, position, attempt, step, kind, status, final,
        compensable, fence, worker_id, output, error, started_at, finished_at,
        workflow_attempt, seq, wake_at)
    SELECT v.run_id, v.position, v.attempt, v.step, v.kind, v.status, v.final, v.compensable,
        v.fence, :worker_id, v.output, v.error, now() - v.elapsed_s * interval '1 second',
        now(), v.workflow_attempt, v.seq, to_timestamp(v.wake_s)
    FROM v JOIN done ON done.id = v.run_id
    ORDER BY v.run_id, v.position, v.attempt
    ON CONFLICT (run_id, position, attempt) DO UPDATE SET
        status = excluded.status, final = excluded.final, compensable = excluded.compensable,
        output = excluded.output, error = excluded.error, finished_at = excluded.finished_at,
        seq = excluded.seq, wake_at = excluded.wake_at
    WHERE {schema}.step_attempts.status <> 'completed'
    RETURNING 1
), leftover AS (
    UPDATE {schema}.step_attempts a SET status = 'canceled', finished_at = now()
    WHERE a.run_id = ANY(ARRAY(SELECT id FROM done)) AND a.status = 'running'
      AND (a.position, a.attempt) NOT IN (SELECT position, attempt FROM v)
    RETURNING a.id
), parent AS (
    UPDATE {schema}.runs p SET
        wake_requested = (p.status = 'running'),
        status = CASE WHEN p.status = 'waiting' THEN 'pending' ELSE p.status END,
        available_at = CASE WHEN p.status = 'waiting' THEN now() ELSE p.available_at END,
        updated_at = now()
    FROM done WHERE p.id = done.parent_run_id AND (p.status IN ('waiting', 'running', 'pending')) IS TRUE
      AND (p.status = 'waiting' AND p.parked_fence = p.fence AND done.id <> ALL(p.parked_on))
          IS NOT TRUE  -- not parked by its claim on other children only: see 0020
    RETURNING p.id, p.wake_requested
), notified AS (
    SELECT pg_notify(:channel, 'run') FROM (SELECT 1 FROM parent LIMIT 1) AS x
    UNION ALL SELECT pg_notify(:channel, 'wake:' || id) FROM parent WHERE wake_requested
    UNION ALL SELECT pg_notify(:channel, 'ended:' || id) FROM done WHERE awaited  -- see await_runs
)
SELECT done.id, (SELECT count(*) FROM notified) AS notified,
    (SELECT count(*) FROM leftover) AS leftover, (SELECT count(*) FROM records) AS records
FROM done;

-- name: finish_many
-- The ends of several runs held by one worker (none with children), as one group commit:
-- `:ends` is a JSON array of {run_id, fence, status, output, error} (output and error as
-- JSON text, stored as `finish_run` stores its parameters), `:batch` their step
-- records not yet durable. Each run is ended as `finish_run` ends one; the ids returned
-- are the runs ended. A parent ending in the same batch is not woken (two updates of one
-- row in one statement would leave only one of them). Run rows, parents included, are
-- locked in id order, as the heartbeat locks them.
WITH e AS (
    SELECT * FROM json_to_recordset(CAST(:ends AS json)) AS e(run_id text, fence bigint,
        status text, output text, error text)
), v AS (
    SELECT * FROM json_to_recordset(CAST(:batch AS json)) AS v(run_id text, fence bigint,
        position integer, attempt integer, step text, kind text, status text, final boolean,
        output json, error jsonb, compensable boolean, elapsed_s float8,
        workflow_attempt integer, seq integer, wake_s float8)
), ids AS (
    -- The runs and their parents (each looked up by its child's id).
    SELECT run_id AS id FROM e
    UNION SELECT p.parent_run_id FROM e CROSS JOIN LATERAL (
        SELECT c.parent_run_id FROM {schema}.runs c WHERE c.id = e.run_id OFFSET 0) p
    WHERE p.parent_run_id IS NOT NULL
), locked AS MATERIALIZED (
    -- All locked in id order before any is updated, each read by its id: OFFSET 0 keeps
    -- the read a lookup (the planner counts 100 rows for a batch of any size, and would
    -- rather read every run than look up that many).
    SELECT r.* FROM (SELECT id FROM ids ORDER BY id) i CROSS JOIN LATERAL (
        SELECT r.id, r.fence, r.status, r.worker_id, r.lease_expires_at, r.compensating
        FROM {schema}.runs r WHERE r.id = i.id
        OFFSET 0 FOR NO KEY UPDATE
    ) r
), mine AS (
    SELECT l.id, l.fence FROM locked l JOIN e ON e.run_id = l.id AND e.fence = l.fence
    WHERE l.worker_id = :worker_id AND l.lease_expires_at > now()
      AND (l.status = 'running' OR l.compensating)
      AND (l.status <> 'canceled' OR e.status = 'canceled')
), done AS (
    UPDATE {schema}.runs r SET
        status = e.status, output = CAST(e.output AS json),
        error = COALESCE(CAST(e.error AS jsonb), r.error),
        available_at = NULL, worker_id = NULL, lease_expires_at = NULL, compensating = false,
        finished_at = COALESCE(r.finished_at, now()), updated_at = now()
    FROM e JOIN mine ON mine.id = e.run_id AND mine.fence = e.fence
    WHERE r.id = e.run_id
    RETURNING r.id, r.fence, r.parent_run_id, r.awaited
), records AS (
    INSERT INTO {schema}.step_attempts (run_id, position, attempt, step, kind, status, final,
        compensable, fence, worker_id, output, error, started_at, finished_at,
        workflow_attempt, seq, wake_at)
    SELECT v.run_id, v.position, v.attempt, v.step, v.kind, v.status, v.final, v.compensable,
        v.fence, :worker_id, v.output, v.error, now() - v.elapsed_s * interval '1 second',
        now(), v.workflow_attempt, v.seq, to_timestamp(v.wake_s)
    FROM v JOIN done ON done.id = v.run_id AND done.fence = v.fence
    ORDER BY v.run_id, v.position, v.attempt  -- as record_many inserts: no deadlock between them
    ON CONFLICT (run_id, position, attempt) DO UPDATE SET
        status = excluded.status, final = excluded.final, compensable = excluded.compensable,
        output = excluded.output, error = excluded.error, finished_at = excluded.finished_at,
        seq = excluded.seq, wake_at = excluded.wake_at
    WHERE {schema}.step_attempts.status <> 'completed'
    RETURNING 1
), leftover AS (
    UPDATE {schema}.step_attempts a SET status = 'canceled', finished_at = now()
    WHERE a.run_id = ANY(ARRAY(SELECT id FROM done)) AND a.status = 'running'
      AND (a.run_id, a.position, a.attempt) NOT IN (SELECT run_id, position, attempt FROM v)
    RETURNING a.id
), parent AS (
    UPDATE {schema}.runs p SET
        wake_requested = (p.status = 'running'),
        status = CASE WHEN p.status = 'waiting' THEN 'pending' ELSE p.status END,
        available_at = CASE WHEN p.status = 'waiting' THEN now() ELSE p.available_at END,
        updated_at = now()
    FROM done WHERE p.id = done.parent_run_id AND (p.status IN ('waiting', 'running', 'pending')) IS TRUE
      AND (p.status = 'waiting' AND p.parked_fence = p.fence AND done.id <> ALL(p.parked_on))
          IS NOT TRUE  -- not parked by its claim on other children only: see 0020
      AND p.id NOT IN (SELECT run_id FROM e)
    RETURNING p.id, p.wake_requested
), notified AS (
    SELECT pg_notify(:channel, 'run') FROM (SELECT 1 FROM parent LIMIT 1) AS x
    UNION ALL SELECT pg_notify(:channel, 'wake:' || id) FROM parent WHERE wake_requested
    UNION ALL SELECT pg_notify(:channel, 'ended:' || id) FROM done WHERE awaited  -- see await_runs
)
SELECT done.id, (SELECT count(*) FROM notified) AS notified,
    (SELECT count(*) FROM leftover) AS leftover, (SELECT count(*) FROM records) AS records
FROM done;

-- name: live_children
-- Children to cancel because their parent ended first.
SELECT id FROM {schema}.runs
WHERE parent_run_id = :run_id AND parent_close = 'cancel'
  AND (status IN ('pending', 'running', 'waiting', 'held')) IS TRUE;

-- name: lock_tree
-- Before a run's tree changes (a cancel; a parent's end that cancels its children): the
-- run, its live descendants that end with it, and its parent, locked in id order, the one
-- order every statement that locks several run rows follows (heartbeat, finish_run,
-- finish_many): a cancel and the end of a run of its tree never deadlock.
-- The children of each run of the tree are read through runs_parent, one lookup per run
-- (a LATERAL kept as a subquery by OFFSET 0): a join the planner may choose instead read
-- all of runs (600 ms at 1M rows) when its statistics were stale.
WITH RECURSIVE tree AS (
    SELECT id, parent_run_id FROM {schema}.runs WHERE id = :run_id
    UNION ALL
    SELECT c.id, c.parent_run_id FROM tree CROSS JOIN LATERAL (
        SELECT r.id, r.parent_run_id FROM {schema}.runs r
        WHERE r.parent_run_id = tree.id AND r.parent_close = 'cancel' OFFSET 0
    ) c
)
SELECT r.id, r.status FROM {schema}.runs r
WHERE r.id = ANY(ARRAY(SELECT id FROM tree UNION ALL SELECT parent_run_id FROM tree WHERE id = :run_id))
  AND (r.id = :run_id OR (r.status IN ('pending', 'running', 'waiting', 'held')) IS TRUE)
ORDER BY r.id
FOR NO KEY UPDATE;

-- name: cancel_tree
-- A run whose worker holds a live lease keeps it (fence and worker): it is marked canceled
-- and `compensating`, and that worker interrupts its bodies, records what already
-- finished (a completed record replaces `canceled`), compensates and ends it. Any other
-- run becomes claimable for its compensations if it has any. Running attempts of both
-- are canceled here.
WITH RECURSIVE tree AS (  -- read as in lock_tree
    SELECT id FROM {schema}.runs WHERE id = :run_id
    UNION ALL
    SELECT c.id FROM tree CROSS JOIN LATERAL (
        SELECT r.id FROM {schema}.runs r
        WHERE r.parent_run_id = tree.id AND r.parent_close = 'cancel' OFFSET 0
    ) c
), canceled AS (
    UPDATE {schema}.runs r SET
        status = 'canceled', error = CAST(:error AS jsonb), updated_at = now(),
        finished_at = CASE WHEN COALESCE(r.lease_expires_at > now(), false) OR EXISTS (
            SELECT 1 FROM {schema}.step_attempts s
            WHERE s.run_id = r.id AND s.compensable AND s.status = 'completed')
            THEN NULL ELSE now() END,
        fence = CASE WHEN COALESCE(r.lease_expires_at > now(), false) THEN r.fence ELSE r.fence + 1 END,
        worker_id = CASE WHEN COALESCE(r.lease_expires_at > now(), false) THEN r.worker_id END,
        compensating = COALESCE(r.lease_expires_at > now(), false) OR EXISTS (
            SELECT 1 FROM {schema}.step_attempts s
            WHERE s.run_id = r.id AND s.compensable AND s.status = 'completed'),
        available_at = CASE
            WHEN COALESCE(r.lease_expires_at > now(), false) THEN r.available_at
            WHEN EXISTS (SELECT 1 FROM {schema}.step_attempts s
                         WHERE s.run_id = r.id AND s.compensable AND s.status = 'completed')
            THEN now() END,
        lease_expires_at = CASE WHEN COALESCE(r.lease_expires_at > now(), false) THEN r.lease_expires_at END
    WHERE r.id = ANY(ARRAY(SELECT id FROM tree))
      AND (r.status IN ('pending', 'running', 'waiting', 'held')) IS TRUE
    RETURNING r.id, r.parent_run_id, r.worker_id
), attempts AS (
    UPDATE {schema}.step_attempts a SET status = 'canceled', finished_at = now()
    WHERE a.run_id = ANY(ARRAY(SELECT id FROM canceled)) AND a.status = 'running'
    RETURNING a.id
), parent AS (
    UPDATE {schema}.runs p SET
        wake_requested = (p.status = 'running'),
        status = CASE WHEN p.status = 'waiting' THEN 'pending' ELSE p.status END,
        available_at = CASE WHEN p.status = 'waiting' THEN now() ELSE p.available_at END
    FROM canceled
    WHERE p.id = canceled.parent_run_id AND (p.status IN ('waiting', 'running')) IS TRUE
      AND (p.status = 'waiting' AND p.parked_fence = p.fence AND canceled.id <> ALL(p.parked_on))
          IS NOT TRUE  -- as in finish_run
      AND p.id NOT IN (SELECT id FROM canceled)
    RETURNING p.id
), notified AS (
    SELECT pg_notify(:channel, 'cancel:' || id) FROM canceled
    UNION ALL SELECT pg_notify(:channel, 'run') FROM (SELECT 1 FROM parent LIMIT 1) AS x
)
SELECT id, (SELECT count(*) FROM attempts) AS attempts, (SELECT count(*) FROM notified) AS notified
FROM canceled;

-- name: lock_signal
SELECT pg_advisory_xact_lock(hashtext(:namespace || '/' || :name)) AS locked;

-- name: find_signal
-- deadline: none
-- Read under the name's lock, which the send waits for as long as it is held (see
-- send_signal): so does this read, the first to wait for it.
SELECT * FROM {schema}.signals
WHERE namespace = :namespace AND name = :name AND idempotency_key = :idempotency_key;

-- name: get_run_to_signal
-- deadline: none
-- The run a send addresses, locked as the send will update it (see `Sends.live_run`);
-- after the name's lock, waited for as long as it is held (see send_signal).
SELECT * FROM {schema}.runs WHERE id = :run_id FOR NO KEY UPDATE;

-- name: send_signal
-- deadline: none
-- The name's lock, then the send, in one statement (see 0014). It waits for the lock as
-- long as another transaction holds it (a caller's own, say), as a transaction would: a
-- deadline could also fire once the send had committed, reporting a sent signal as failed.
SELECT delivered_to, buffered, notified FROM {schema}.send_signal(
    :namespace, :name, :data, :idempotency_key, :run_id, :expires_s, :channel);

-- name: take_signal
UPDATE {schema}.signals SET consumed_by = :run_id, consumed_at = now()
WHERE id = (
    SELECT id FROM {schema}.signals
    WHERE namespace = :namespace AND name = :name AND buffered AND consumed_at IS NULL
      AND (run_id IS NULL OR run_id = :run_id) AND (expires_at IS NULL OR expires_at > now())
    ORDER BY given_back DESC, id LIMIT 1 FOR UPDATE  -- what it got back first (see 0010)
)
RETURNING data, expires_at;

-- name: deliver_buffered
-- After a give-back (`give_back_signal`, `abandon_wait`), in its transaction, under
-- `lock_signal` of :name: the run's earliest wait on it that began while the signal was on
-- its way back found the buffer empty, and a recorded wait receives only what is delivered
-- to it. It takes what the buffer holds for it now, as it would have at its start
-- (`take_signal`), and receives it as a send delivers; its position comes back. Only the
-- waits of the lease's workflow attempt: an earlier attempt's ended with it.
WITH lease AS (
    SELECT namespace FROM {schema}.runs
    WHERE id = :run_id AND fence = :fence AND worker_id = :worker_id
      AND lease_expires_at > now() AND (status = 'running' OR compensating)
    FOR KEY SHARE
), wait AS (
    SELECT a.id FROM {schema}.step_attempts a
    WHERE a.run_id = :run_id AND a.workflow_attempt = :workflow_attempt
      AND a.kind = 'signal-wait' AND a.status = 'running' AND a.signal = :name
      AND a.delivered_at IS NULL
    ORDER BY a.position LIMIT 1 FOR UPDATE  -- a cancel that ends it first: none is taken
), taken AS (
    UPDATE {schema}.signals SET consumed_by = :run_id, consumed_at = now()
    WHERE id = (
        SELECT s.id FROM {schema}.signals s, lease
        WHERE s.namespace = lease.namespace AND s.name = :name AND s.buffered
          AND s.consumed_at IS NULL AND (s.run_id IS NULL OR s.run_id = :run_id)
          AND (s.expires_at IS NULL OR s.expires_at > now()) AND EXISTS (SELECT 1 FROM wait)
        ORDER BY s.given_back DESC, s.id LIMIT 1 FOR UPDATE OF s
    )
    RETURNING data, expires_at
)
UPDATE {schema}.step_attempts a SET output = taken.data, delivered_at = now(),
    signal_expires_at = taken.expires_at
FROM wait, taken WHERE a.id = wait.id
RETURNING a.position;

-- name: list_tables
SELECT table_schema || '.' || table_name AS name FROM information_schema.tables
WHERE table_schema = :schema ORDER BY table_name;

-- name: check_held
SELECT r.id, r.status, r.wake_requested FROM {schema}.runs r
JOIN unnest(CAST(:ids AS text[]), CAST(:fences AS bigint[])) AS h(id, fence)
  ON r.id = h.id AND r.fence = h.fence
WHERE r.worker_id = :worker_id AND (r.status = 'running' OR r.compensating);

-- name: worker_seen
INSERT INTO {schema}.workers (id, workflows, concurrency)
VALUES (:worker_id, CAST(:workflows_json AS jsonb), :concurrency)
ON CONFLICT (id) DO UPDATE SET last_seen_at = now(), workflows = excluded.workflows
RETURNING id;

-- name: worker_gone
DELETE FROM {schema}.workers WHERE id = :worker_id OR last_seen_at < now() - interval '1 day'
RETURNING id;

-- name: list_workers
SELECT * FROM {schema}.workers ORDER BY started_at;

-- name: list_stuck
-- plan: each call
-- Held runs (they wait for code that matches their history: runs_status), and due runs.
SELECT r.* FROM {schema}.runs r WHERE r.status = 'held'
UNION ALL
SELECT r.* FROM {schema}.runs r
WHERE r.available_at <= now() AND r.status IN ('pending', 'waiting', 'running')
  AND (r.available_at <= now() - :grace_s * interval '1 second'
       OR NOT EXISTS (SELECT 1 FROM {schema}.workers w
                      WHERE w.last_seen_at > now() - :alive_s * interval '1 second'
                        AND w.workflows @> jsonb_build_array(jsonb_build_array(r.workflow, r.version))))
ORDER BY available_at
LIMIT :limit;

-- name: metrics
SELECT 'runs' AS metric, status AS label, count(*)::float8 AS value
FROM {schema}.runs GROUP BY status
UNION ALL
SELECT 'steps', status, count(*)::float8 FROM {schema}.step_attempts GROUP BY status
UNION ALL
SELECT 'due', '', count(*)::float8 FROM {schema}.runs
WHERE available_at <= now() AND status IN ('pending', 'waiting')
UNION ALL
SELECT 'claim_latency_avg', '', COALESCE(avg(EXTRACT(EPOCH FROM started_at - created_at)), 0)
FROM {schema}.runs WHERE started_at > now() - interval '5 minutes'
UNION ALL
SELECT 'worker_seen_age', id, EXTRACT(EPOCH FROM now() - last_seen_at) FROM {schema}.workers;

-- name: record_many
-- Group commit: step records of several runs held by one worker, as a JSON array. A row
-- is written only if its run's lease (same fence) is still this worker's; a completed
-- record is never overwritten. Run rows are locked in id order (as the heartbeat does).
WITH v AS (
    SELECT * FROM json_to_recordset(CAST(:batch AS json)) AS v(run_id text, fence bigint,
        position integer, attempt integer, step text, kind text, status text, final boolean,
        output json, error jsonb, compensable boolean, elapsed_s float8,
        workflow_attempt integer, seq integer, wake_s float8)
), lease AS (
    -- Each run looked up by its id, in id order (see finish_many's `locked`).
    SELECT r.* FROM (SELECT DISTINCT run_id FROM v ORDER BY run_id) i CROSS JOIN LATERAL (
        SELECT r.id, r.fence, r.status FROM {schema}.runs r
        WHERE r.id = i.run_id AND r.worker_id = :worker_id
          AND r.lease_expires_at > now() AND (r.status = 'running' OR r.compensating)
        OFFSET 0 FOR KEY SHARE
    ) r
), ins AS (
INSERT INTO {schema}.step_attempts (run_id, position, attempt, step, kind, status, final,
    compensable, fence, worker_id, output, error, started_at, finished_at, workflow_attempt,
    seq, wake_at)
SELECT v.run_id, v.position, v.attempt, v.step, v.kind, v.status, v.final, v.compensable,
    v.fence, :worker_id, v.output, v.error, now() - v.elapsed_s * interval '1 second', now(),
    v.workflow_attempt, v.seq, to_timestamp(v.wake_s)
FROM v JOIN lease ON lease.id = v.run_id AND lease.fence = v.fence
ORDER BY v.run_id, v.position, v.attempt  -- one order for every batch insert: no deadlock
ON CONFLICT (run_id, position, attempt) DO UPDATE SET
    status = excluded.status, final = excluded.final, compensable = excluded.compensable,
    output = excluded.output, error = excluded.error, finished_at = excluded.finished_at,
    seq = excluded.seq, wake_at = excluded.wake_at
WHERE {schema}.step_attempts.status <> 'completed'
RETURNING run_id, position, attempt
)
-- The run's status rides back: a cancel whose NOTIFY was missed is seen here.
SELECT ins.*, lease.status AS run_status FROM ins JOIN lease ON lease.id = ins.run_id;

-- name: abandon_wait
-- The workflow stopped waiting (a `wait_first` loser, a workflow retry): the wait ends
-- canceled; a signal already delivered to it goes back to the run's buffer (for a loser,
-- `deliver_buffered` follows in the same transaction).
WITH lease AS (
    SELECT namespace FROM {schema}.runs
    WHERE id = :run_id AND fence = :fence AND worker_id = :worker_id
      AND lease_expires_at > now() AND (status = 'running' OR compensating)
    FOR KEY SHARE
), gone AS (
    -- delivered_at is cleared (the signal is back in the buffer: a resume must not return
    -- it again); the row is locked first, so the value returned is the latest.
    UPDATE {schema}.step_attempts a SET status = 'canceled', finished_at = now(),
        delivered_at = NULL
    FROM (SELECT id, delivered_at FROM {schema}.step_attempts
          WHERE run_id = :run_id AND position = :position AND attempt = :attempt
            AND status = 'running'
          FOR UPDATE) old
    WHERE a.id = old.id AND EXISTS (SELECT 1 FROM lease)
    RETURNING a.kind, a.signal, a.output, a.signal_expires_at, old.delivered_at
), back AS (
    INSERT INTO {schema}.signals (namespace, name, data, run_id, buffered, given_back,
        expires_at)
    SELECT lease.namespace, gone.signal, gone.output, :run_id, true, true,
        gone.signal_expires_at
    FROM gone, lease
    WHERE gone.kind = 'signal-wait' AND gone.delivered_at IS NOT NULL
    RETURNING id
)
SELECT (SELECT count(*) FROM lease) AS held, (SELECT count(*) FROM back) AS returned;

-- name: upsert_queue
-- A queue's limits as the app declares them (the last worker to start wins), declared for
-- `:ttl` seconds at least (see 0008).
INSERT INTO {schema}.queues (name, concurrency, per_key, rate_limit, rate_period_s, priority,
    on_full, declared_until)
VALUES (:name, :concurrency, :per_key, :rate_limit, :rate_period_s, :priority, :on_full,
    now() + :ttl * interval '1 second')
ON CONFLICT (name) DO UPDATE SET concurrency = excluded.concurrency,
    per_key = excluded.per_key, rate_limit = excluded.rate_limit,
    rate_period_s = excluded.rate_period_s, priority = excluded.priority,
    on_full = excluded.on_full, updated_at = now(),
    declared_until = GREATEST({schema}.queues.declared_until, excluded.declared_until)
RETURNING name;

-- name: renew_queues
-- A worker's heartbeat keeps its queues declared for `:ttl` seconds more; rows locked in
-- name order, as the unqueued claim locks lapsed ones.
WITH mine AS (
    SELECT name FROM {schema}.queues WHERE name = ANY(CAST(:names AS text[]))
    ORDER BY name
    FOR NO KEY UPDATE
)
UPDATE {schema}.queues q SET
    declared_until = GREATEST(q.declared_until, now() + :ttl * interval '1 second')
FROM mine WHERE q.name = mine.name
RETURNING q.name;

-- name: lock_queue
-- Serialises the claims of one queue: the claim that follows, a statement of its own,
-- reads the counts with a snapshot taken after the previous claim committed. The claiming
-- worker declares the queue: a declaration less than half a `:ttl` ahead is renewed here,
-- under the lock (an unqueued claim never takes the runs of a queue claimed this way).
WITH locked AS (
    SELECT name, declared_until FROM {schema}.queues WHERE name = :queue FOR UPDATE
), renewed AS (
    UPDATE {schema}.queues q SET declared_until = now() + :ttl * interval '1 second'
    FROM locked WHERE q.name = locked.name
      AND (locked.declared_until IS NULL
           OR locked.declared_until < now() + :ttl * interval '0.5 second')
)
SELECT name FROM locked;

-- name: claim_queue
-- Under lock_queue: the room the queue has (`concurrency` minus its running runs; `rate`
-- minus its first claims in the window), the due runs of the namespace of each served
-- (workflow, version) of the queue, highest priority then oldest first (a key already at
-- `per_key` is passed over, so it blocks no other key), and of those the first that fit
-- every limit. Only runs that become `running` take a slot, only first claims count
-- against the rate. A queue is one per schema, its limits shared by every namespace (see
-- `_queues`): its room counts the runs of all of them.
-- Claimed rows, their abandoned attempts, history and `taken_from`: as in `claim` (a run
-- taken over is one of the holders). If fitting runs were left for lack of this worker's
-- slots, other workers are told.
WITH q AS (
    SELECT * FROM {schema}.queues WHERE name = :queue
), busy AS (
    -- Running runs, and canceled ones running their compensations: both run code.
    SELECT concurrency_key AS k, count(*) AS n FROM {schema}.runs
    WHERE queue = :queue AND (status = 'running' OR compensating) GROUP BY concurrency_key
), room AS (
    SELECT q.per_key,
        COALESCE(q.concurrency - (SELECT COALESCE(sum(n), 0) FROM busy), :limit) AS slots,
        COALESCE(q.rate_limit - (SELECT count(*) FROM {schema}.runs s
            WHERE s.queue = :queue AND s.started_at IS NOT NULL
              AND s.started_at > now() - q.rate_period_s * interval '1 second'), :limit) AS firsts
    FROM q
), takers AS (
    SELECT c.*
    FROM room, unnest(CAST(:workflows AS text[]), CAST(:versions AS text[]))
        AS p(workflow, version)
    CROSS JOIN LATERAL (
        SELECT r.id, r.priority, r.available_at, r.concurrency_key,
            r.started_at IS NULL AS fresh
        FROM {schema}.runs r
        WHERE room.slots > 0 AND r.namespace = :namespace AND r.workflow = p.workflow
          AND r.version = p.version AND r.queue IS NOT NULL AND r.queue = :queue
          AND r.available_at <= now() AND r.id <> ALL(CAST(:held AS text[]))  -- see claim
          AND r.status IN ('pending', 'waiting', 'held')
          AND (room.per_key IS NULL OR r.concurrency_key IS NULL
               OR COALESCE((SELECT n FROM busy WHERE k = r.concurrency_key), 0) < room.per_key)
        ORDER BY r.priority DESC, r.available_at
        LIMIT :scan
        FOR UPDATE OF r SKIP LOCKED
    ) c
), holders AS (
    -- Runs that already hold their slot: a lease that expired, a canceled run's
    -- compensations. A full queue must still let them be taken over.
    SELECT r.id, r.priority, r.available_at, r.concurrency_key, r.worker_id
    FROM {schema}.runs r
    WHERE r.queue = :queue AND r.status IN ('running', 'canceled') AND r.available_at <= now()
      AND r.namespace = :namespace AND r.id <> ALL(CAST(:held AS text[]))
      AND (r.workflow, r.version) IN (SELECT * FROM unnest(CAST(:workflows AS text[]),
                                                          CAST(:versions AS text[])))
    LIMIT :scan
    FOR UPDATE OF r SKIP LOCKED
), cand AS (
    SELECT takers.*, true AS takes FROM takers
    UNION ALL
    SELECT id, priority, available_at, concurrency_key, false, false FROM holders
), keyed AS (
    SELECT cand.*, row_number() OVER (PARTITION BY concurrency_key, takes
        ORDER BY priority DESC, available_at, id) AS key_rank
    FROM cand
), fitting AS (
    SELECT keyed.id, room.slots, room.firsts,
        sum(CASE WHEN takes THEN 1 ELSE 0 END) OVER w AS used,
        sum(CASE WHEN fresh THEN 1 ELSE 0 END) OVER w AS started,
        row_number() OVER w AS n
    FROM keyed, room
    WHERE room.per_key IS NULL OR concurrency_key IS NULL OR NOT takes
       OR key_rank + COALESCE((SELECT n FROM busy WHERE k = concurrency_key), 0) <= room.per_key
    WINDOW w AS (ORDER BY priority DESC, available_at, id)
), due AS (
    SELECT id, n FROM fitting WHERE used <= slots AND started <= firsts
), claimed AS (
    UPDATE {schema}.runs r SET
        fence = r.fence + 1,
        worker_id = :worker_id,
        status = CASE WHEN r.status IN ('pending', 'waiting', 'held') THEN 'running' ELSE r.status END,
        error = CASE WHEN r.status = 'held' THEN NULL ELSE r.error END,  -- see hold_run
        attempts = GREATEST(r.attempts, 1),
        lease_expires_at = now() + :lease * interval '1 second',
        available_at = now() + :lease * interval '1 second',
        wake_requested = false, waiting_for = NULL, wake_at = NULL,
        started_at = COALESCE(r.started_at, now()),
        updated_at = now(),
        -- A run `start_run` queued from SQL (max_attempts 0): the pair's, as in `claim`.
        max_attempts = CASE WHEN r.max_attempts <> 0 THEN r.max_attempts ELSE (
            SELECT p.max_attempts FROM unnest(CAST(:workflows AS text[]),
                CAST(:versions AS text[]), CAST(:max_attempts AS integer[]))
                AS p(workflow, version, max_attempts)
            WHERE p.workflow = r.workflow AND p.version = r.version) END
    WHERE r.id = ANY(ARRAY(SELECT id FROM due WHERE n <= :limit))  -- looked up (see claim)
    RETURNING r.*
), notified AS (
    SELECT pg_notify(:channel, 'run') FROM (SELECT 1 FROM due WHERE n > :limit LIMIT 1) AS x
)
SELECT claimed.*, now() AS db_now, (SELECT count(*) FROM notified) AS notified,
    {schema}.claimed_history(claimed.id) AS history,  -- read once the run is locked (0012)
    (SELECT h.worker_id FROM holders h WHERE h.id = claimed.id) AS taken_from
FROM claimed;

-- name: foreign_queues
-- Declared queues the worker does not declare that hold due runs of its namespace of a
-- pair it serves: a workflow moved to another queue while the old one is still declared by
-- workers that do not serve it (or only by workers of other namespaces). One probe of
-- runs_queued_in_namespace per queue and pair (the queues are few).
SELECT q.name FROM {schema}.queues q
WHERE q.declared_until > now() AND q.name <> ALL(CAST(:mine AS text[]))
  AND EXISTS (
    SELECT 1 FROM unnest(CAST(:workflows AS text[]), CAST(:versions AS text[]))
        AS p(workflow, version)
    WHERE EXISTS (SELECT 1 FROM {schema}.runs r
                  WHERE r.namespace = :namespace AND r.workflow = p.workflow
                    AND r.version = p.version AND r.queue = q.name
                    AND r.available_at <= now()))
ORDER BY q.name;

-- name: queue_next
-- When an idle worker should look at a queue again: its next run of the namespace to come
-- due, or when its rate window lets one more start. NULL: only a slot freed elsewhere (or
-- the poll).
SELECT LEAST(
    (SELECT min(n.next_at)
     FROM unnest(CAST(:workflows AS text[]), CAST(:versions AS text[])) AS p(workflow, version)
     CROSS JOIN LATERAL (
        SELECT min(r.available_at) AS next_at FROM {schema}.runs r
        WHERE r.namespace = :namespace AND r.workflow = p.workflow AND r.version = p.version
          AND r.queue IS NOT NULL AND r.queue = :queue AND r.available_at > now()) n),
    (SELECT min(s.started_at + q.rate_period_s * interval '1 second')
     FROM {schema}.queues q JOIN {schema}.runs s ON s.queue = q.name
     WHERE q.name = :queue AND q.rate_limit IS NOT NULL AND s.started_at IS NOT NULL
       AND s.started_at > now() - q.rate_period_s * interval '1 second')
) AS next_at, now() AS db_now;

-- name: queue_counts
-- Each declared queue with its running and waiting (pending: due or not) runs.
SELECT q.name, q.concurrency, q.per_key, q.rate_limit, q.rate_period_s, q.priority,
    q.on_full,
    (SELECT count(*) FROM {schema}.runs r
     WHERE r.queue = q.name AND (r.status = 'running' OR r.compensating)) AS running,
    (SELECT count(*) FROM {schema}.runs r WHERE r.queue = q.name AND r.status = 'pending')
        AS waiting
FROM {schema}.queues q ORDER BY q.name;

-- name: lock_key
-- A start of a queue with an `on_full` strategy (SPEC §4.23), after its insert: starts of
-- one (queue, concurrency_key) admit one after the other (`store.admission`); key_runs,
-- a statement of its own, then sees every start admitted before. Two-key advisory locks
-- (class 29): the one-key ones of lock_signal never collide with them.
SELECT pg_advisory_xact_lock(29, hashtext(:queue || '/' || :key)) AS locked;

-- name: key_runs
-- Under lock_key: the other runs of the key that hold or want a slot, newest first, all
-- namespaces (a queue's limits count them all). Waiting runs that are not due (asleep,
-- on a signal) hold none, as in claim_queue; canceled runs running their compensations
-- hold theirs. Each status is one range of runs_queue (a LATERAL kept as a subquery by
-- OFFSET 0: flattened, its generic plan read the key's whole history, or every live run
-- through runs_status); the compensating ones, one of runs_queue_compensating.
SELECT r.id, r.status, r.compensating, r.created_at
FROM unnest(ARRAY['pending', 'running', 'held', 'waiting']) AS s(status)
CROSS JOIN LATERAL (
    SELECT id, status, compensating, created_at, available_at FROM {schema}.runs
    WHERE queue = :queue AND status = s.status AND concurrency_key = :key AND id <> :id
    OFFSET 0
) r
WHERE r.status <> 'waiting' OR r.available_at <= now()
UNION
SELECT id, status, compensating, created_at FROM {schema}.runs
WHERE queue = :queue AND concurrency_key = :key AND id <> :id AND compensating
ORDER BY created_at DESC, id DESC;

-- name: refuse_run
-- A start that `on_full="cancel_new"` refuses (under lock_key, in the transaction that
-- inserted it): canceled at once, as cancel_tree ends a run that never ran (no lease, no
-- children, nothing to undo); no worker has seen it.
UPDATE {schema}.runs SET status = 'canceled', error = CAST(:error AS jsonb),
    finished_at = now(), updated_at = now(), fence = fence + 1, available_at = NULL
WHERE id = :id AND (status = 'pending') IS TRUE  -- by id (see the header)
RETURNING *;

-- name: schedule_last_tick
-- As `last_tick_at`: a time, which the SQLite connector converts by its name.
SELECT last_tick AS last_tick_at FROM {schema}.schedules WHERE namespace = :namespace AND workflow = :workflow;

-- name: schedule_ticked
-- The latest tick started for a scheduled workflow (never moved back).
INSERT INTO {schema}.schedules (namespace, workflow, schedule, tz, last_tick)
VALUES (:namespace, :workflow, :schedule, :tz, :tick)
ON CONFLICT (namespace, workflow) DO UPDATE SET schedule = excluded.schedule,
    tz = excluded.tz, updated_at = now(),
    last_tick = GREATEST({schema}.schedules.last_tick, excluded.last_tick)
RETURNING last_tick;

-- Operating runs (§4.18): resume, fork, events, signal housekeeping, retention.

-- name: resume_run
-- A failed or canceled run becomes due again as its next workflow attempt, listed in
-- `resumes`: replay keeps everything the run received, failures only where the code needs
-- them (see `_replay.History`), with the same number of workflow attempts still to spend. A deadline already passed no longer applies. A signal
-- delivered to a wait that ended unrecorded (the run was canceled or failed first) goes back
-- to the run's buffer, so the resumed run's wait receives it.
WITH resumed AS (
    UPDATE {schema}.runs SET
        status = 'pending', attempts = attempts + 1, max_attempts = max_attempts + attempts,
        resumes = resumes || to_jsonb(attempts + 1),
        output = NULL, error = NULL, available_at = now(), finished_at = NULL,
        worker_id = NULL, lease_expires_at = NULL, wake_requested = false,
        waiting_for = NULL, wake_at = NULL, compensating = false,
        deadline_at = CASE WHEN deadline_at <= now() THEN NULL ELSE deadline_at END,
        updated_at = now()
    WHERE id = :run_id AND status IN ('failed', 'canceled') AND NOT compensating
    RETURNING *
), unread AS (
    UPDATE {schema}.step_attempts a SET delivered_at = NULL
    FROM resumed
    WHERE a.run_id = resumed.id AND a.kind = 'signal-wait' AND a.status <> 'completed'
      AND a.delivered_at IS NOT NULL
    RETURNING resumed.namespace, a.signal, a.output, a.run_id, a.signal_expires_at
), back AS (
    INSERT INTO {schema}.signals (namespace, name, data, run_id, buffered, given_back,
        expires_at)
    SELECT namespace, signal, output, run_id, true, true, signal_expires_at FROM unread
    RETURNING id
), notified AS (
    SELECT pg_notify(:channel, 'run') FROM resumed
)
SELECT resumed.*, (SELECT count(*) FROM notified) AS notified,
    (SELECT count(*) FROM back) AS returned
FROM resumed;

-- name: log_rows
SELECT id, position, attempt, step, kind, status, final, compensable, signal, child_run_id,
    wake_at, workflow_attempt, seq
FROM {schema}.step_attempts WHERE run_id = :run_id ORDER BY position, attempt;

-- name: copy_step
INSERT INTO {schema}.step_attempts (run_id, position, attempt, step, kind, status, final,
    compensable, fence, worker_id, signal, child_run_id, wake_at, output, error, started_at,
    finished_at, workflow_attempt, seq)
SELECT :new_run_id, position, attempt, step, kind, status, final, compensable, 0, worker_id,
    signal, child_run_id, wake_at, output, error, started_at, finished_at, 1, :seq
FROM {schema}.step_attempts WHERE id = :id
RETURNING id;

-- name: find_runs_by_prefix
SELECT id FROM {schema}.runs WHERE starts_with(id, :prefix) ORDER BY id LIMIT 10;

-- name: set_event
-- A fenced write of an event step; its NOTIFY wakes `get_event` callers.
WITH lease AS (
    SELECT 1 FROM {schema}.runs
    WHERE id = :run_id AND fence = :fence AND worker_id = :worker_id
      AND lease_expires_at > now() AND (status = 'running') IS TRUE
    FOR KEY SHARE
), ins AS (
    INSERT INTO {schema}.step_attempts (run_id, position, attempt, step, kind, status, fence,
        worker_id, output, finished_at, workflow_attempt, seq)
    SELECT :run_id, :position, :attempt, :step, 'event', 'completed', :fence, :worker_id,
        CAST(:output AS json), now(), :workflow_attempt, :seq
    FROM lease
    ON CONFLICT (run_id, position, attempt) DO NOTHING
    RETURNING id
), notified AS (
    SELECT pg_notify(:channel, 'event:' || :run_id) FROM ins
)
SELECT ins.id, (SELECT count(*) FROM notified) AS notified FROM ins;

-- name: get_event
SELECT output::text AS output FROM {schema}.step_attempts
WHERE run_id = :run_id AND kind = 'event' AND step = :key AND status = 'completed'
ORDER BY id DESC LIMIT 1;

-- name: list_events
SELECT DISTINCT ON (step) step AS key, output::text AS value, finished_at AS set_at
FROM {schema}.step_attempts
WHERE run_id = :run_id AND kind = 'event' AND status = 'completed'
ORDER BY step, id DESC;

-- name: set_attributes
-- A fenced write of a `ctx.step.set_attributes` step (kind "attributes", its output the
-- attributes given), merged into the run's attributes in the same statement: only by the
-- insert of the step's record, so a record written already (its attempt at this position)
-- merges nothing again. The run's row is updated under the lease's FOR KEY SHARE, which
-- this statement's own update does not wait for.
WITH lease AS (
    SELECT 1 FROM {schema}.runs
    WHERE id = :run_id AND fence = :fence AND worker_id = :worker_id
      AND lease_expires_at > now() AND (status = 'running') IS TRUE
    FOR KEY SHARE
), ins AS (
    INSERT INTO {schema}.step_attempts (run_id, position, attempt, step, kind, status, fence,
        worker_id, output, finished_at, workflow_attempt, seq)
    SELECT :run_id, :position, :attempt, :step, 'attributes', 'completed', :fence, :worker_id,
        CAST(:output AS json), now(), :workflow_attempt, :seq
    FROM lease
    ON CONFLICT (run_id, position, attempt) DO NOTHING
    RETURNING id
), merged AS (
    UPDATE {schema}.runs SET attributes = COALESCE(attributes, jsonb_build_object()) || CAST(:output AS jsonb)
    WHERE id = :run_id AND EXISTS (SELECT 1 FROM ins)
    RETURNING id
)
SELECT ins.id, (SELECT count(*) FROM merged) AS merged FROM ins;

-- name: list_signals
-- plan: each call
SELECT id, name, data::text AS data, created_at, expires_at, consumed_by, buffered,
    delivered_to::text AS delivered_to
FROM {schema}.signals
WHERE namespace = :namespace AND (CAST(:name AS text) IS NULL OR name = :name)
  AND (NOT :pending OR (buffered AND consumed_at IS NULL
                        AND (expires_at IS NULL OR expires_at > now())))
ORDER BY id
LIMIT :limit;

-- name: delete_signal
DELETE FROM {schema}.signals WHERE namespace = :namespace AND id = :id RETURNING id;

-- name: purge_pick
-- plan: each call
-- The next batch of finished runs to purge, oldest first; a child whose parent still runs
-- is kept (the parent may yet read its result). Locked rows are passed over.
SELECT r.id FROM {schema}.runs r
WHERE r.namespace = :namespace AND r.finished_at <= now() - :older_s * interval '1 second'
  AND r.status = ANY(CAST(:statuses AS text[])) AND NOT r.compensating
  AND (CAST(:workflow AS text) IS NULL OR r.workflow = :workflow)
  AND NOT EXISTS (SELECT 1 FROM {schema}.runs p WHERE p.id = r.parent_run_id
                  AND (p.status IN ('pending', 'running', 'waiting', 'held')) IS TRUE)
ORDER BY r.finished_at
LIMIT :batch
FOR UPDATE SKIP LOCKED;

-- name: purge_consumed
DELETE FROM {schema}.signals WHERE consumed_by = ANY(CAST(:ids AS text[])) RETURNING id;

-- name: purge_addressed
-- Signals left in a purged run's own buffer (addressed to it, or put back by a resume):
-- nothing can take them any more.
DELETE FROM {schema}.signals
WHERE run_id = ANY(CAST(:ids AS text[])) AND buffered AND consumed_at IS NULL
RETURNING id;

-- name: purge_runs
-- Their steps go with them (ON DELETE CASCADE).
DELETE FROM {schema}.runs WHERE id = ANY(CAST(:ids AS text[])) RETURNING id;

-- name: purge_signals
-- plan: each call
-- Signals no run will consume: delivered at send time (kept for their idempotency key),
-- or expired while buffered; older than the cut-off.
DELETE FROM {schema}.signals WHERE id IN (
    SELECT id FROM {schema}.signals
    WHERE namespace = :namespace AND consumed_at IS NULL
      AND ((NOT buffered AND created_at <= now() - :older_s * interval '1 second')
           OR expires_at <= now() - :older_s * interval '1 second')
    LIMIT :batch
)
RETURNING id;

-- name: take_maintenance
-- One holder of a periodic job at a time: taken when free or past `until`.
INSERT INTO {schema}.maintenance (name, holder, until)
VALUES (:name, :holder, now() + :every_s * interval '1 second')
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, until = excluded.until
WHERE {schema}.maintenance.until <= now()
RETURNING holder;

-- ===== streams (§4.21) =====

-- name: stream_take
-- The next offset of a run's stream, for a writer that holds the run's lease; nothing when
-- the stream is closed or the lease is gone. FOR SHARE: an end of the run (an UPDATE of its
-- row) waits for the write, so no value commits after the run ended.
WITH lease AS (
    SELECT 1 FROM {schema}.runs
    WHERE id = :run_id AND fence = :fence AND worker_id = :worker_id
      AND lease_expires_at > now() AND (status = 'running') IS TRUE
    FOR SHARE
)
INSERT INTO {schema}.streams AS s (run_id, key, next_offset)
SELECT :run_id, :key, 1 FROM lease
ON CONFLICT (run_id, key) DO UPDATE SET next_offset = s.next_offset + 1
    WHERE s.closed_at IS NULL
RETURNING s.next_offset - 1 AS "offset";

-- name: stream_put
WITH ins AS (
    INSERT INTO {schema}.stream_values (run_id, key, "offset", value)
    VALUES (:run_id, :key, :offset, CAST(:value AS json))
    RETURNING "offset"
), notified AS (
    SELECT pg_notify(:channel, 'stream:' || :run_id) FROM ins
)
SELECT ins."offset", (SELECT count(*) FROM notified) AS notified FROM ins;

-- name: stream_step
-- The step record of a workflow's write or close (kind 'stream'), in the transaction of
-- the write itself: a kill between the two leaves neither.
INSERT INTO {schema}.step_attempts (run_id, position, attempt, step, kind, status, fence,
    worker_id, output, finished_at, workflow_attempt, seq)
SELECT :run_id, :position, :attempt, :step, 'stream', 'completed', :fence, :worker_id,
    CAST(:output AS json), now(), :workflow_attempt, :seq
WHERE EXISTS (SELECT 1 FROM {schema}.runs
              WHERE id = :run_id AND fence = :fence AND worker_id = :worker_id
                AND lease_expires_at > now() AND (status = 'running') IS TRUE)
ON CONFLICT (run_id, position, attempt) DO NOTHING
RETURNING id;

-- name: stream_close
WITH lease AS (
    SELECT 1 FROM {schema}.runs
    WHERE id = :run_id AND fence = :fence AND worker_id = :worker_id
      AND lease_expires_at > now() AND (status = 'running') IS TRUE
    FOR SHARE
), closed AS (
    INSERT INTO {schema}.streams AS s (run_id, key, closed_at)
    SELECT :run_id, :key, now() FROM lease
    ON CONFLICT (run_id, key) DO UPDATE SET closed_at = coalesce(s.closed_at, now())
    RETURNING s.run_id
), notified AS (
    SELECT pg_notify(:channel, 'stream:' || :run_id) FROM closed
)
SELECT closed.run_id, (SELECT count(*) FROM notified) AS notified FROM closed;

-- name: stream_state
-- Read before the values: a stream closed (or a run ended) here has all its values in
-- the read that follows.
SELECT r.status, s.closed_at IS NOT NULL AS closed
FROM {schema}.runs r LEFT JOIN {schema}.streams s ON s.run_id = r.id AND s.key = :key
WHERE r.id = :run_id;

-- name: stream_poll
-- A reader's look: the stream's state and its values from :from_offset, in one statement,
-- so in one snapshot: a stream closed (or a run ended) in it has all its values in it.
SELECT r.status, s.closed_at IS NOT NULL AS closed, v."offset", v.value
FROM {schema}.runs r
LEFT JOIN {schema}.streams s ON s.run_id = r.id AND s.key = :key
LEFT JOIN (SELECT "offset", value::text AS value FROM {schema}.stream_values
           WHERE run_id = :run_id AND key = :key AND "offset" >= :from_offset
           ORDER BY "offset" LIMIT :limit) v ON true
WHERE r.id = :run_id
ORDER BY v."offset";

-- name: stream_read
SELECT "offset", value::text AS value FROM {schema}.stream_values
WHERE run_id = :run_id AND key = :key AND "offset" >= :from_offset
ORDER BY "offset" LIMIT :limit;

-- name: stream_list
SELECT key, next_offset AS length, closed_at IS NOT NULL AS closed FROM {schema}.streams
WHERE run_id = :run_id ORDER BY key;

-- name: stream_write
-- A workflow's write in one statement (stream_take, stream_step and stream_put in one):
-- nothing when the stream is closed or the lease is gone. Run in a transaction, rolled
-- back when the step's record was there already (the offset taken is then given back).
WITH lease AS (
    SELECT 1 FROM {schema}.runs
    WHERE id = :run_id AND fence = :fence AND worker_id = :worker_id
      AND lease_expires_at > now() AND (status = 'running') IS TRUE
    FOR SHARE
), taken AS (
    INSERT INTO {schema}.streams AS s (run_id, key, next_offset)
    SELECT :run_id, :key, 1 FROM lease
    ON CONFLICT (run_id, key) DO UPDATE SET next_offset = s.next_offset + 1
        WHERE s.closed_at IS NULL
    RETURNING s.next_offset - 1 AS "offset"
), step AS (
    INSERT INTO {schema}.step_attempts (run_id, position, attempt, step, kind, status, fence,
        worker_id, output, finished_at, workflow_attempt, seq)
    SELECT :run_id, :position, :attempt, :step, 'stream', 'completed', :fence, :worker_id,
        to_json(taken."offset"), now(), :workflow_attempt, :seq
    FROM taken
    ON CONFLICT (run_id, position, attempt) DO NOTHING
    RETURNING id
), put AS (
    INSERT INTO {schema}.stream_values (run_id, key, "offset", value)
    SELECT :run_id, :key, taken."offset", CAST(:value AS json) FROM taken
    RETURNING "offset"
), notified AS (
    SELECT pg_notify(:channel, 'stream:' || :run_id) FROM put
)
SELECT put."offset", (SELECT count(*) FROM step) AS recorded,
    (SELECT count(*) FROM notified) AS notified
FROM put;
-- ===== requests =====
-- Requests with answers (SPEC §4.22, store/requests.py).

-- name: find_request
SELECT id FROM {schema}.requests WHERE run_id = :run_id AND idempotency_key = :idempotency_key;

-- name: insert_request
INSERT INTO {schema}.requests (id, run_id, name, idempotency_key)
VALUES (:id, :run_id, :name, :idempotency_key);

-- name: get_request
SELECT id, run_id, name, status, answer::text AS answer, reason FROM {schema}.requests
WHERE id = :id;

-- name: answer_request
-- Only a pending request takes an answer; its NOTIFY wakes the client waiting for it.
WITH answered AS (
    UPDATE {schema}.requests
    SET status = :status, answer = CAST(:answer AS json), reason = :reason, answered_at = now()
    WHERE id = :id AND run_id = :run_id AND status = 'pending'
    RETURNING run_id
)
SELECT pg_notify(:channel, 'event:' || run_id) AS notified FROM answered;
-- ===== continue-as-new =====
-- A run that continues as new (SPEC §4.23, store/continues.py) is first ended `continued`
-- by finish_run, in the same transaction as these.

-- name: continue_key
-- The chain's idempotency key moves to its next run (a start with it returns the newest
-- run of the chain): off the run that continued first, as the unique index wants.
UPDATE {schema}.runs SET idempotency_key = NULL
WHERE id = :run_id AND status = 'continued' AND idempotency_key IS NOT NULL;

-- name: continue_run
-- plan: each call
-- (Once a continue, rare: a generic plan made on an empty schema ties signals_buffered,
-- read whole, with signals_addressed, and took the former.)
-- The next run of the chain: the same workflow, version, namespace, queue and key,
-- priority, deadline, parent (which waits for the chain's end), trace, search attributes
-- (as the old run ended with them, merged ones included); attempts from 0, an
-- empty history. Signals buffered for the old run move to it, and so does one delivered
-- to a wait the old run never read (its end canceled the wait; it is given back).
WITH ins AS (
    INSERT INTO {schema}.runs (id, namespace, workflow, version, status, input,
        idempotency_key, max_attempts, available_at, deadline_at, parent_run_id,
        trace_context, parent_close, queue, concurrency_key, priority, continued_from, chain_root,
        attributes)
    SELECT :next_id, o.namespace, o.workflow, o.version, 'pending', CAST(:input AS json),
        :idempotency_key, o.max_attempts, LEAST(now(), o.deadline_at), o.deadline_at,
        o.parent_run_id, o.trace_context, o.parent_close, o.queue, o.concurrency_key,
        o.priority, o.id, COALESCE(o.chain_root, o.id), o.attributes
    FROM {schema}.runs o WHERE o.id = :run_id AND (o.status = 'continued') IS TRUE  -- by id
    RETURNING id, namespace, available_at
), moved AS (
    UPDATE {schema}.signals s SET run_id = :next_id
    WHERE s.run_id = :run_id AND s.buffered AND s.consumed_at IS NULL
      AND EXISTS (SELECT 1 FROM ins)
    RETURNING s.id
), held AS (
    UPDATE {schema}.step_attempts a SET delivered_at = NULL
    WHERE a.run_id = :run_id AND a.kind = 'signal-wait' AND a.status = 'canceled'
      AND a.delivered_at IS NOT NULL AND EXISTS (SELECT 1 FROM ins)
    RETURNING a.signal, a.output, a.signal_expires_at
), back AS (
    INSERT INTO {schema}.signals (namespace, name, data, run_id, buffered, given_back,
        expires_at)
    SELECT ins.namespace, held.signal, held.output, :next_id, true, true,
        held.signal_expires_at
    FROM held, ins
    RETURNING id
), notified AS (
    SELECT pg_notify(:channel, 'run') FROM ins WHERE ins.available_at <= now()
)
SELECT ins.id, (SELECT count(*) FROM moved) + (SELECT count(*) FROM back) AS signals,
    (SELECT count(*) FROM notified) AS notified
FROM ins;

-- name: continue_requests
-- A run's unanswered requests move with it when it continues (store/continues.py), and
-- one it took but did not answer goes back to the next run's buffer (its wait's data is
-- the request's envelope), so the run that can answer it receives it again.
WITH taken AS (
    INSERT INTO {schema}.signals (namespace, name, data, run_id, buffered, given_back)
    SELECT r.namespace, a.signal, a.output, :next_id, true, true
    FROM {schema}.step_attempts a JOIN {schema}.runs r ON r.id = :next_id
    WHERE a.run_id = :run_id AND a.kind = 'signal-wait' AND a.status = 'completed'
      AND starts_with(a.signal, :prefix)
      AND EXISTS (SELECT 1 FROM {schema}.requests q
                  WHERE q.run_id = :run_id AND q.status = 'pending'
                    AND q.id = a.output ->> 'id')
    ORDER BY a.seq
)
UPDATE {schema}.requests SET run_id = :next_id WHERE run_id = :run_id AND status = 'pending';
