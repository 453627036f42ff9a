-- Waits, after review: a waiting job counts toward its tenant's cap on unfinished jobs
-- (a delayed job, a sleeping one and a parent waiting on children are unfinished work),
-- so the cap's partial index covers `waiting` too.
DROP INDEX IF EXISTS jobs_tenant_in_flight;
CREATE INDEX jobs_tenant_in_flight ON jobs (tenant)
    WHERE state IN ('queued', 'leased', 'running', 'retrying', 'stalled', 'waiting');
