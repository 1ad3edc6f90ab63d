-- Plans of the hot statements as the engine runs them: prepared, generic plan.
-- psql -v s=p90 -f explain.sql
SET search_path = :s;
SET plan_cache_mode = force_generic_plan;
SET jit = off;
PREPARE get_by_id(text) AS SELECT * FROM runs WHERE id = $1;
PREPARE get_pruned(text) AS SELECT * FROM runs WHERE id = $1 AND part = run_part($1);
PREPARE claim AS WITH c AS (
    SELECT id FROM runs
    WHERE namespace = 'default' AND workflow = 'bench' AND version = 'v1'
      AND available_at IS NOT NULL AND queue IS NULL AND available_at <= now()
    ORDER BY available_at LIMIT 10 FOR UPDATE SKIP LOCKED)
SELECT count(*) FROM c;
SELECT bench_id(4242) AS id \gset
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, SUMMARY ON) EXECUTE get_by_id(:'id');
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, SUMMARY ON) EXECUTE get_pruned(:'id');
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, SUMMARY ON) EXECUTE claim;
PREPARE claim_floor AS WITH c AS (
    SELECT id FROM runs
    WHERE namespace = 'default' AND workflow = 'bench' AND version = 'v1'
      AND available_at IS NOT NULL AND queue IS NULL AND available_at <= now()
      AND part >= claim_floor()
    ORDER BY available_at LIMIT 10 FOR UPDATE SKIP LOCKED)
SELECT count(*) FROM c;
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, SUMMARY ON) EXECUTE claim_floor;
