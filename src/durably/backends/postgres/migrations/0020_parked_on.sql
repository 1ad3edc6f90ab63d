-- The children a parked run waits for (`park`), and the fence of the claim that parked it:
-- a child's end wakes its parent unless the parent was parked by its current claim on other
-- children only (issue 31 item 14). A child started and not awaited yet, or no longer
-- awaited, ends without claiming and replaying its parent: the claim that awaits it reads
-- its end. A run parked before this migration, or parked again by a worker of the previous
-- release (which writes neither column, and whose claim raised the fence), is woken by
-- every child's end, as before. Nullable, no default: no table rewrite.
ALTER TABLE {schema}.runs ADD COLUMN IF NOT EXISTS parked_on text[],
    ADD COLUMN IF NOT EXISTS parked_fence bigint;
