-- The claim's read, kept to the partitions at or after the oldest one holding a live run:
-- claim_floor() is a STABLE function reading a one-row table the maintenance keeps, so
-- the older partitions are pruned at executor start, never opened.
WITH c AS (
    SELECT id FROM runs
    WHERE namespace = 'default' AND workflow = 'bench' AND version = 'v1'
      AND available_at IS NOT NULL AND queue IS NULL AND available_at <= now()
      AND part >= claim_floor()
    ORDER BY available_at LIMIT 10 FOR UPDATE SKIP LOCKED)
SELECT count(*) FROM c;
