-- The live floor of schema :s (see hot/claim_floor.sql): the oldest part a live run may
-- be in, kept in a one-row table. Here: today.  psql -v s=p30 -f floor.sql
SET search_path = :s;
CREATE TABLE live_floor (one boolean PRIMARY KEY DEFAULT true CHECK (one), part date NOT NULL);
INSERT INTO live_floor (part) VALUES (current_date);
CREATE FUNCTION claim_floor() RETURNS date STABLE LANGUAGE sql
    AS $$ SELECT part FROM live_floor $$;
