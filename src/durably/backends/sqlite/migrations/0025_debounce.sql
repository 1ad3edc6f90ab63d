-- Debounce (SPEC §4.23; see the PostgreSQL twin): at most one pending, never claimed run
-- per (namespace, workflow, debounce key); `debounce_run` inserts against this index.
ALTER TABLE {schema}_runs ADD COLUMN debounce_key TEXT;
ALTER TABLE {schema}_runs ADD COLUMN debounce_max_at REAL;
CREATE UNIQUE INDEX {schema}_runs_debounce ON {schema}_runs (namespace, workflow, debounce_key)
WHERE debounce_key IS NOT NULL AND status = 'pending' AND fence = 0;
