-- Which workflow attempt recorded a step attempt: a workflow retry gives every step a
-- fresh budget, and a step that failed for good in an earlier attempt runs again.
ALTER TABLE {schema}_step_attempts ADD COLUMN workflow_attempt INTEGER NOT NULL DEFAULT 1;
