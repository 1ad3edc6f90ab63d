-- Streams (§4.21): values a run publishes as it goes, read in order from any offset.
-- `streams` is one row per (run, key): the next offset to give, and the close mark; the
-- upsert that takes an offset locks the row, so concurrent writers (step bodies) get dense
-- offsets. Values are json (not jsonb): their text is kept as written (§4.20).
CREATE TABLE IF NOT EXISTS {schema}.streams (
    run_id      text NOT NULL REFERENCES {schema}.runs (id) ON DELETE CASCADE,
    key         text NOT NULL,
    next_offset bigint NOT NULL DEFAULT 0,
    closed_at   timestamptz,
    PRIMARY KEY (run_id, key)
);
CREATE TABLE IF NOT EXISTS {schema}.stream_values (
    run_id     text NOT NULL,
    key        text NOT NULL,
    "offset"   bigint NOT NULL,
    value      json NOT NULL,
    written_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, key, "offset"),
    FOREIGN KEY (run_id, key) REFERENCES {schema}.streams (run_id, key) ON DELETE CASCADE
);
