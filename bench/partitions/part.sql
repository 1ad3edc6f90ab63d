-- The proposed id format and its partition: a UUIDv8 (version nibble 8 at the 13th hex
-- digit) whose last 4 hex digits are the run's day, counted from 2000-01-01. Any other id
-- (the uuid4 and uuid5 ids of today) is a legacy run: part '-infinity'.
CREATE FUNCTION run_part(id text) RETURNS date IMMUTABLE PARALLEL SAFE LANGUAGE sql
RETURN CASE WHEN length(id) = 32 AND substr(id, 13, 1) = '8'
            THEN date '2000-01-01' + CAST(CAST('x' || right(id, 4) AS bit(16)) AS integer)
            ELSE date '-infinity' END;
-- A new id from 32 random hex digits (gen_random_uuid, uuid4().hex, or a uuid5 for a
-- child, given its parent's part).
CREATE FUNCTION new_run_id(random_hex text, part date) RETURNS text IMMUTABLE LANGUAGE sql
RETURN left(random_hex, 12) || '8' || substr(random_hex, 14, 15)
       || lpad(to_hex(part - date '2000-01-01'), 4, '0');
