-- Per-key strategies (SPEC §4.23): see the PostgreSQL twin.
ALTER TABLE {schema}_queues ADD COLUMN on_full TEXT NOT NULL DEFAULT 'wait';
