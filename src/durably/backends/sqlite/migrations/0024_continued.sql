-- A run that continued as new ends `continued` (see the PostgreSQL twin). The CHECK is
-- edited in place as 0019 edits it (read it for why this is safe and why in this order);
-- the index that follows changes the schema's version, so every connection reads it again.
-- It serves `durably show`'s link back from a run to the one it continued.
ALTER TABLE {schema}_runs ADD COLUMN continued_from TEXT;
ALTER TABLE {schema}_runs ADD COLUMN chain_root TEXT;
PRAGMA writable_schema = ON;
UPDATE sqlite_master SET sql = replace(sql, '''held'', ''completed''',
    '''held'', ''continued'', ''completed''')
WHERE type = 'table' AND name = '{schema}_runs';
PRAGMA writable_schema = RESET;
CREATE INDEX {schema}_runs_continued_from ON {schema}_runs (continued_from)
WHERE continued_from IS NOT NULL;
