-- The workflow attempts that began by a resume (`app.resume`), in order: replay keeps
-- everything such an attempt's predecessor received, where a workflow retry cuts at the
-- first failure (see `_replay.History`).
ALTER TABLE {schema}_runs ADD COLUMN resumes TEXT NOT NULL DEFAULT '[]';
