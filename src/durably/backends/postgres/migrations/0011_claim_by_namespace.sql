-- A worker claims only the runs of its app's namespace (`Durably(namespace=)`): the claims
-- and their look-ahead read one range per (namespace, workflow, version) of runs_due, and
-- per (namespace, workflow, version, queue) of runs_queued, so the runs of other
-- namespaces cost them nothing, as those of unserved versions (see 0005) do not.
-- Built in the migration's transaction, as 0006 and 0008 built theirs (CONCURRENTLY cannot
-- run in one): writes to runs wait for the build.
DROP INDEX IF EXISTS {schema}.runs_due;
CREATE INDEX runs_due ON {schema}.runs (namespace, workflow, version, available_at)
    WHERE available_at IS NOT NULL AND queue IS NULL;
DROP INDEX IF EXISTS {schema}.runs_queued;
CREATE INDEX runs_queued ON {schema}.runs
    (namespace, workflow, version, queue, priority DESC, available_at)
    WHERE available_at IS NOT NULL AND queue IS NOT NULL;
