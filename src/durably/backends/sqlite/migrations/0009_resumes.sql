-- The workflow attempts that began by a resume (`app.resume`), in order: replay keeps
-- everything such an attempt's predecessor received, where a workflow retry cuts at the
-- first failure (see `_replay.History`).
ALTER TABLE {schema}_runs ADD COLUMN resumes TEXT NOT NULL DEFAULT '[]';
-- A run's own buffer (signals addressed to it, or put back by a resume): purged with it.
CREATE INDEX {schema}_signals_addressed ON {schema}_signals (run_id)
    WHERE run_id IS NOT NULL AND buffered AND consumed_at IS NULL;
