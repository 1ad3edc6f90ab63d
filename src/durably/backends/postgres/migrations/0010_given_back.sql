-- A signal given back to the run that took it (a workflow retry runs the wait that took it
-- again, a `wait_first` stopped awaiting it, a resume found it delivered to a wait that
-- ended unrecorded) was sent before anything in the buffer now: the run's waits take it
-- first (see `take_signal`).
ALTER TABLE {schema}.signals ADD COLUMN given_back boolean NOT NULL DEFAULT false;
DROP INDEX IF EXISTS {schema}.signals_buffered;
CREATE INDEX signals_buffered ON {schema}.signals (namespace, name, given_back DESC, id)
    WHERE buffered AND consumed_at IS NULL;
