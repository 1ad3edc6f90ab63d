\set g random(1, 1000000)
SELECT * FROM runs WHERE id = bench_id(:g) AND part = run_part(bench_id(:g));
