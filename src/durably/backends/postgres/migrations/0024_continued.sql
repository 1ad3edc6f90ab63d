-- Continue-as-new (SPEC §4.23): a run that continued ends `continued` (terminal for the
-- run, not for its chain: its output, `continued_as`, names the next run), and
-- the next run says which it continues (`continued_from`). The CHECK is added NOT VALID,
-- as 0019's: it only allows more, and validating would read the whole table under lock.
ALTER TABLE {schema}.runs DROP CONSTRAINT IF EXISTS runs_status_check;
ALTER TABLE {schema}.runs ADD CONSTRAINT runs_status_check CHECK (status IN
    ('pending', 'running', 'waiting', 'held', 'continued', 'completed', 'failed', 'canceled'))
    NOT VALID;
ALTER TABLE {schema}.runs ADD COLUMN IF NOT EXISTS continued_from text;
-- The first run of the chain (NULL on it): a start with the chain's idempotency key, which
-- the newest run holds, is compared with the input the chain was started with.
ALTER TABLE {schema}.runs ADD COLUMN IF NOT EXISTS chain_root text;
