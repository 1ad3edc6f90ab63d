-- The children a parked run waits for, as a JSON array, and the fence of the claim that
-- parked it (see the PostgreSQL twin).
ALTER TABLE {schema}_runs ADD COLUMN parked_on TEXT;
ALTER TABLE {schema}_runs ADD COLUMN parked_fence INTEGER;
