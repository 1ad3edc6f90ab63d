-- The claim and next_due read the due runs of each (workflow, version) a worker serves
-- from this index, oldest first, so a backlog of versions that no worker serves costs
-- them nothing (runs_claim still serves the queries over every version: list_due, stuck).
CREATE INDEX IF NOT EXISTS {schema}_runs_due ON {schema}_runs (workflow, version, available_at)
    WHERE available_at IS NOT NULL;
