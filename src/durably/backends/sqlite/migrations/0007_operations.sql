-- Operating runs (§4.18). Buffered signals may expire; purging finished runs reads them by
-- `finished_at` and deletes the signals they consumed; `maintenance` holds one lease per
-- periodic job (retention), so one worker at a time does it.
ALTER TABLE {schema}_signals ADD COLUMN expires_at REAL;
CREATE INDEX {schema}_runs_finished ON {schema}_runs (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX {schema}_signals_consumed ON {schema}_signals (consumed_by)
    WHERE consumed_by IS NOT NULL;
CREATE TABLE {schema}_maintenance (
    name   TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    until  REAL NOT NULL
);
