-- The children a parked run waits for, as a JSON array (see the PostgreSQL twin).
ALTER TABLE {schema}_runs ADD COLUMN parked_on TEXT;
