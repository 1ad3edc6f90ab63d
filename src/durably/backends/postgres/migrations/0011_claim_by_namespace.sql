-- durably: no transaction
-- A worker claims only the runs of its app's namespace (`Durably(namespace=)`): the claims
-- and their look-ahead read one range per (namespace, workflow, version) of
-- runs_due_in_namespace, and per (namespace, workflow, version, queue) of
-- runs_queued_in_namespace, so the runs of other namespaces cost them nothing, as those of
-- unserved versions (see 0005) do not.
-- Built CONCURRENTLY, outside a transaction (the first line): a build in the migration's
-- transaction held every write to runs (claims, ends, heartbeats of the previous release's
-- workers) for as long as it took on a table of millions of runs. Each new index is built
-- before the one it replaces is dropped, so the claims always have one; under a new name,
-- so that every statement is a no-op once done and a run of this file stopped half-way
-- can be run again from the top (a build left invalid is dropped first by the runner).
-- SQLite's twin keeps the old names.
CREATE INDEX CONCURRENTLY IF NOT EXISTS runs_due_in_namespace ON {schema}.runs
    (namespace, workflow, version, available_at)
    WHERE available_at IS NOT NULL AND queue IS NULL;
DROP INDEX CONCURRENTLY IF EXISTS {schema}.runs_due;
CREATE INDEX CONCURRENTLY IF NOT EXISTS runs_queued_in_namespace ON {schema}.runs
    (namespace, workflow, version, queue, priority DESC, available_at)
    WHERE available_at IS NOT NULL AND queue IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS {schema}.runs_queued;
