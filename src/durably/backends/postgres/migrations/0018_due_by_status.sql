-- durably: no transaction
-- runs_claim, on available_at of every run with something left to do, served the operator's
-- lists of due runs (list_due, list_stuck, the `due` metric); the claim could read it too,
-- in available_at order, passing over the due runs of every pair it does not serve. The
-- planner took it whenever its statistics were from a table whose due runs were all of the
-- served pair (a backlog, drained since): then 100k runs of an unserved version started,
-- and every claim read them all to find its 10, until the next ANALYZE (issue 26 item 15).
-- Its successor is partial on a status, which the claim does not test: it cannot serve the
-- claim, whatever the statistics say, and the claim is left with its pairs' ranges of
-- runs_due_in_namespace. The operator's queries each test a status within it. Built
-- CONCURRENTLY, before the old one is dropped, as 0011's (see there).
CREATE INDEX CONCURRENTLY IF NOT EXISTS runs_due_by_status ON {schema}.runs (available_at)
    WHERE available_at IS NOT NULL AND status IN ('pending', 'waiting', 'running');
DROP INDEX CONCURRENTLY IF EXISTS {schema}.runs_claim;
