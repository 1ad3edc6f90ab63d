-- A run whose replay does not match its history is `held` (see the PostgreSQL twin).
-- SQLite cannot alter a CHECK: the table's definition is edited in place, which SQLite
-- documents as safe for a constraint that only allows more (every row meets it already).
-- The column is added first (ADD COLUMN edits the stored definition at an offset taken from
-- the one this connection has read); RESET makes this connection read the edited one, and
-- the index that follows changes the schema's version, so every other connection does too.
-- The index serves `list_stuck`'s held runs.
ALTER TABLE {schema}_runs ADD COLUMN holds INTEGER NOT NULL DEFAULT 0;
PRAGMA writable_schema = ON;
UPDATE sqlite_master SET sql = replace(sql, '''waiting'', ''completed''',
    '''waiting'', ''held'', ''completed''')
WHERE type = 'table' AND name = '{schema}_runs';
PRAGMA writable_schema = RESET;
CREATE INDEX {schema}_runs_held ON {schema}_runs (status, available_at) WHERE status = 'held';
