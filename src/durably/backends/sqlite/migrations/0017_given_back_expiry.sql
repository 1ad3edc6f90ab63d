-- A signal a wait received keeps its expiry on the wait's record, so one given back to the
-- run's buffer expires when it was sent to (see the PostgreSQL twin).
ALTER TABLE {schema}_step_attempts ADD COLUMN signal_expires_at REAL;
