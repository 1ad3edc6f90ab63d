-- Streams (§4.21): see the PostgreSQL twin.
CREATE TABLE IF NOT EXISTS {schema}_streams (
    run_id      TEXT NOT NULL REFERENCES {schema}_runs (id) ON DELETE CASCADE,
    key         TEXT NOT NULL,
    next_offset INTEGER NOT NULL DEFAULT 0,
    closed_at   REAL,
    PRIMARY KEY (run_id, key)
);
CREATE TABLE IF NOT EXISTS {schema}_stream_values (
    run_id     TEXT NOT NULL,
    key        TEXT NOT NULL,
    "offset"   INTEGER NOT NULL,
    value      TEXT NOT NULL,
    written_at REAL NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0),
    PRIMARY KEY (run_id, key, "offset"),
    FOREIGN KEY (run_id, key) REFERENCES {schema}_streams (run_id, key) ON DELETE CASCADE
);
