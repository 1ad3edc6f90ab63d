-- durably: no transaction
-- Debounce (SPEC §4.23): a start with `debounce_key` joins the pending run of its window,
-- or opens a window with a new run. The window is the run while it is pending and no
-- worker ever claimed it (fence 0): the unique index below holds at most one such run per
-- (namespace, workflow, key), and `debounce_run` inserts against it (ON CONFLICT ... DO
-- UPDATE), so the database decides which start opens a window and the others join it,
-- across any number of processes. A claim (fence + 1, status running) takes the run out of
-- the index in its own write: the next start opens a new window. No worker query changes,
-- so a worker of the previous release keeps claiming debounced runs correctly.
-- `debounce_max_at` is how far the window may push `available_at` (first start +
-- `debounce_max`; NULL: no cap). The key stays on the run once it is claimed (`show`).
-- Outside a transaction (the first line), as 0011: the index is built CONCURRENTLY, since
-- a build in a transaction would hold every write to runs for as long as it reads the
-- table; each column is added in a transaction of its own with the migrator's short lock
-- waits. Every statement is a no-op once done, so a run of this file stopped half-way can
-- be run again from the top.
ALTER TABLE {schema}.runs ADD COLUMN IF NOT EXISTS debounce_key text;
ALTER TABLE {schema}.runs ADD COLUMN IF NOT EXISTS debounce_max_at timestamptz;
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS runs_debounce ON {schema}.runs
    (namespace, workflow, debounce_key)
    WHERE debounce_key IS NOT NULL AND status = 'pending' AND fence = 0;
