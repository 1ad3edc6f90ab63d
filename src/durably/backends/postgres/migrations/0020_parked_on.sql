-- The children a parked run waits for (`park`): a child's end wakes its parent only if it
-- is one of them (issue 31 item 14). A child started and not awaited yet, or no longer
-- awaited, ends without claiming and replaying its parent, whose next claim reads its end.
-- NULL (a run parked before this migration): every child's end wakes it, as before.
ALTER TABLE {schema}.runs ADD COLUMN IF NOT EXISTS parked_on text[];
