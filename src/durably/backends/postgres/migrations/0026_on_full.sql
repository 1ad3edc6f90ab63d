-- Per-key strategies (SPEC §4.23): what a start whose concurrency_key is full does, as the
-- workers declare it (`upsert_queue`), shown with the queue's limits. A constant default
-- adds the column without rewriting the table; a worker of an older deploy leaves it as
-- it is (its upsert does not name it). The start enforces the strategy its own code
-- declares (`store.admission`): this column is what the dashboard and the CLI show.
ALTER TABLE {schema}.queues ADD COLUMN IF NOT EXISTS on_full text NOT NULL DEFAULT 'wait';
