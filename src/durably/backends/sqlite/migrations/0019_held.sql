-- A run whose replay does not match its history is `held` (see the PostgreSQL twin).
-- SQLite cannot alter a CHECK: the table's definition is edited in place, which SQLite
-- documents as safe for a constraint that only allows more (every row meets it already).
-- The index that follows changes the schema's version, so every connection reads the new
-- definition; it serves `list_stuck`'s held runs.
PRAGMA writable_schema = ON;
UPDATE sqlite_master SET sql = replace(sql, '''waiting'', ''completed''',
    '''waiting'', ''held'', ''completed''')
WHERE type = 'table' AND name = '{schema}_runs';
PRAGMA writable_schema = OFF;
ALTER TABLE {schema}_runs ADD COLUMN holds INTEGER NOT NULL DEFAULT 0;
CREATE INDEX {schema}_runs_held ON {schema}_runs (available_at) WHERE status = 'held';
