-- Step 1: the partition key, on every row at once. A constant default is stored in the
-- catalog (no rewrite): a moment's ACCESS EXCLUSIVE, waited for at most lock_timeout.
-- Every run there is, and every one an old worker starts from now on, is a legacy run.
\set ON_ERROR_STOP on
\timing on
SET search_path = :s;
SET lock_timeout = '2s';
ALTER TABLE runs ADD COLUMN part date NOT NULL DEFAULT '-infinity';
ALTER TABLE step_attempts ADD COLUMN part date NOT NULL DEFAULT '-infinity';
