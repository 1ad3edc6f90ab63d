-- Operating runs (§4.18). Buffered signals may expire; purging finished runs reads them by
-- `finished_at` and deletes the signals they consumed; `maintenance` holds one lease per
-- periodic job (retention), so one worker at a time does it.
ALTER TABLE {schema}.signals ADD COLUMN expires_at timestamptz;
CREATE INDEX runs_finished ON {schema}.runs (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX signals_consumed ON {schema}.signals (consumed_by) WHERE consumed_by IS NOT NULL;
CREATE TABLE {schema}.maintenance (
    name   text PRIMARY KEY,
    holder text NOT NULL,
    until  timestamptz NOT NULL
);
