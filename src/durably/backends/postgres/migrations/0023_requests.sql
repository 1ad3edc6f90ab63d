-- Requests with answers (SPEC §4.22): a client's question to one run, delivered as a
-- signal addressed to it (on the reserved name `request:<name>`, so it is buffered FIFO,
-- taken by a wait and given back as a signal is) and answered by the run's `reply` step,
-- which writes the answer here in the same transaction as its record. A run's requests
-- go with it when it is purged.
CREATE TABLE {schema}.requests (
    id              text PRIMARY KEY,
    run_id          text NOT NULL REFERENCES {schema}.runs (id) ON DELETE CASCADE,
    name            text NOT NULL,
    idempotency_key text,
    status          text NOT NULL DEFAULT 'pending'
                      CHECK (status IN ('pending', 'answered', 'rejected')),
    answer          json,
    reason          text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    answered_at     timestamptz
);
CREATE UNIQUE INDEX requests_idempotency ON {schema}.requests (run_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX requests_run ON {schema}.requests (run_id);
