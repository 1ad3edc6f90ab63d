-- Live workers and the (workflow, version) pairs they run: `durably runs --stuck` lists due
-- runs that no live worker can take.
CREATE TABLE {schema}_workers (
    id           TEXT PRIMARY KEY,
    workflows    TEXT NOT NULL,
    concurrency  INTEGER NOT NULL,
    started_at   REAL NOT NULL,
    last_seen_at REAL NOT NULL
);
