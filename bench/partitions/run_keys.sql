-- What stays row by row when a day is dropped: its runs' idempotency keys in the small
-- unpartitioned run_keys table. :n keys of one day, then deleted in batches of 10,000
-- (one transaction each, as the purge would).  psql -v s=rk -v n=1000000 -f run_keys.sql
\set ON_ERROR_STOP on
DROP SCHEMA IF EXISTS :s CASCADE;
CREATE SCHEMA :s;
SET search_path = :s;
CREATE TABLE run_keys (
    namespace text NOT NULL, workflow text NOT NULL, kind text NOT NULL, key text NOT NULL,
    run_id text NOT NULL, part date NOT NULL
);
CREATE UNIQUE INDEX runs_idempotency ON run_keys (namespace, workflow, key)
    WHERE kind = 'idempotency';
CREATE INDEX run_keys_part ON run_keys (part);
INSERT INTO run_keys
SELECT 'default', 'bench', 'idempotency', 'key-' || g, md5(CAST(g AS text)), current_date - 40
FROM generate_series(1, :n) g;
VACUUM ANALYZE run_keys;
\timing on
DO $$
BEGIN
    LOOP
        DELETE FROM run_keys WHERE ctid = ANY(ARRAY(
            SELECT ctid FROM run_keys WHERE part = current_date - 40 LIMIT 10000));
        EXIT WHEN NOT FOUND;
        COMMIT;
    END LOOP;
END $$;
