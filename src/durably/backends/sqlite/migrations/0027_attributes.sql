-- Search attributes (SPEC §4.24, core/attributes.py): the run's JSON object of scalars, as
-- on PostgreSQL, in `attributes`; and, to find runs by them, one row per key in
-- run_attributes, kept by triggers from the column (so every statement that writes it, of
-- this release or the next, keeps it; a previous release's worker writes none). A lookup
-- reads the index (key, value) for each key of a filter. `value` has no declared type, so
-- no affinity: a string '30' is not the number 30, which equals 30.0 (as with jsonb @>),
-- a boolean is a one-byte blob, so that true is not 1. Rows go with their run (CASCADE).
-- Measured against a JSON index (json_extract in an expression index serves one key known
-- in advance, not any key): see `python -m bench attributes`.
ALTER TABLE {schema}_runs ADD COLUMN attributes TEXT;
CREATE TABLE IF NOT EXISTS {schema}_run_attributes (
    run_id TEXT NOT NULL REFERENCES {schema}_runs (id) ON DELETE CASCADE,
    key    TEXT NOT NULL,
    value  NOT NULL,
    PRIMARY KEY (run_id, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS {schema}_run_attributes_match
    ON {schema}_run_attributes (key, value);
CREATE TRIGGER IF NOT EXISTS {schema}_runs_attributes_inserted AFTER INSERT ON {schema}_runs
WHEN new.attributes IS NOT NULL BEGIN
    INSERT OR REPLACE INTO {schema}_run_attributes (run_id, key, value) SELECT new.id, e.key, CASE e.type WHEN 'true' THEN x'01' WHEN 'false' THEN x'00' ELSE e.value END FROM json_each(new.attributes) AS e; END;
CREATE TRIGGER IF NOT EXISTS {schema}_runs_attributes_merged
AFTER UPDATE OF attributes ON {schema}_runs
WHEN new.attributes IS NOT NULL BEGIN
    INSERT OR REPLACE INTO {schema}_run_attributes (run_id, key, value) SELECT new.id, e.key, CASE e.type WHEN 'true' THEN x'01' WHEN 'false' THEN x'00' ELSE e.value END FROM json_each(new.attributes) AS e; END;
