-- After the cutover: an old worker's start (no part: a legacy run), a new one's (an id of
-- today, part from run_part), a step of each, a wrong part refused, the key rule holding.
\set ON_ERROR_STOP off
SET search_path = :s;
INSERT INTO runs (id, namespace, workflow, version, status)
VALUES (replace(CAST(gen_random_uuid() AS text), '-', ''), 'default', 'bench', 'v1', 'pending')
RETURNING tableoid::regclass AS old_worker_run, id AS old_id \gset
INSERT INTO step_attempts (run_id, position, attempt, step, status, fence)
VALUES (:'old_id', 1, 1, 's', 'running', 1) RETURNING tableoid::regclass AS old_worker_step;
SELECT new_run_id(md5(CAST(random() AS text)), current_date) AS new_id \gset
INSERT INTO runs (id, part, namespace, workflow, version, status)
VALUES (:'new_id', run_part(:'new_id'), 'default', 'bench', 'v1', 'pending')
RETURNING tableoid::regclass AS new_run;
INSERT INTO step_attempts (run_id, part, position, attempt, step, status, fence)
VALUES (:'new_id', run_part(:'new_id'), 1, 1, 's', 'running', 1)
RETURNING tableoid::regclass AS new_step;
\echo expect: a step whose run is not in its partition is refused (foreign key)
INSERT INTO step_attempts (run_id, part, position, attempt, step, status, fence)
VALUES (new_run_id(md5('x'), current_date), current_date, 1, 1, 's', 'running', 1);
\echo expect: the same id under another part is refused (key rule)
INSERT INTO runs (id, part, namespace, workflow, version, status)
VALUES (:'new_id', current_date + 1, 'default', 'bench', 'v1', 'pending');
\echo expect: a child of the new run in the same partition, then the parent deleted
INSERT INTO runs (id, part, namespace, workflow, version, status, parent_run_id)
VALUES (new_run_id(md5('child'), current_date), current_date, 'default', 'bench', 'v1',
        'pending', :'new_id');
DELETE FROM runs WHERE id = :'new_id' AND part = run_part(:'new_id');
SELECT parent_run_id IS NULL AS child_orphaned_to_null,
       (SELECT count(*) FROM step_attempts WHERE run_id = :'new_id') AS steps_left
FROM runs WHERE id = new_run_id(md5('child'), current_date);
