-- A run someone waits for (`RunHandle.wait`): only the end of such a run notifies `ended:`
-- (see await_runs, finish_run, finish_many). PostgreSQL serializes the commits of the
-- transactions that notify, every listener (each worker's) hears every message, and almost
-- no end has a waiter. A constant default: no table rewrite.
-- SQLite has no such column (see the twin).
ALTER TABLE {schema}.runs ADD COLUMN awaited boolean NOT NULL DEFAULT false;
