-- Parked jobs are released highest priority first (then oldest first): a tenant's high
-- job parked behind its own flood of normal ones goes out at the next lease's end.
-- The index 0013 made ordered by age alone; priorities came in 0014.
DROP INDEX jobs_tenant_parked;
CREATE INDEX jobs_tenant_parked ON jobs (tenant, (priority <> 'high'), (priority = 'low'), created_at, id)
    WHERE parked AND state = 'queued';
