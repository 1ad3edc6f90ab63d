\set g random(1, 1000000)
UPDATE runs SET updated_at = now() WHERE id = bench_id(:g);
