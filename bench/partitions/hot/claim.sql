-- The claim's read: the due runs of one (workflow, version) by runs_due_in_namespace, locked.
WITH c AS (
    SELECT id FROM runs
    WHERE namespace = 'default' AND workflow = 'bench' AND version = 'v1'
      AND available_at IS NOT NULL AND queue IS NULL AND available_at <= now()
    ORDER BY available_at LIMIT 10 FOR UPDATE SKIP LOCKED)
SELECT count(*) FROM c;
