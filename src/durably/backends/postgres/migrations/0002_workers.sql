-- Live workers and the (workflow, version) pairs they run: `durably runs --stuck` lists due
-- runs that no live worker can take.
CREATE TABLE {schema}.workers (
    id           text PRIMARY KEY,
    workflows    jsonb NOT NULL,
    concurrency  integer NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    last_seen_at timestamptz NOT NULL DEFAULT now()
);
