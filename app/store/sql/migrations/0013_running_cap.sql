-- Per-tenant concurrency while running (docs/explain/design.md#parking): at most N of a
-- tenant's jobs hold a live lease at once; TASKLEASE_MAX_RUNNING_PER_TENANT is the
-- default, this column a tenant's override (NULL: the default). The claim counts them
-- in its own statement, from the partial index below: no counter row, nothing locked.
ALTER TABLE tenant_limits ADD COLUMN max_running integer CHECK (max_running >= 1);

CREATE INDEX jobs_tenant_leased ON jobs (tenant, lease_expires_at)
    WHERE state IN ('leased', 'running');

-- A tenant's window on the queue: at most its running cap times
-- TASKLEASE_QUEUE_WINDOW_PER_SLOT of its jobs have a message (queued, retrying, stalled)
-- or a lease (leased, running) at once. A job submitted past the window is written
-- parked: queued, with no message, until one of the tenant's leases ends and the worker
-- that ended it releases the oldest parked job (or the sweeper does). So a flood of one
-- tenant's jobs waits in PostgreSQL, not on the queue ahead of every other tenant's.
-- A constant default: ADD COLUMN rewrites nothing.
ALTER TABLE jobs ADD COLUMN parked boolean NOT NULL DEFAULT false;

CREATE INDEX jobs_tenant_parked ON jobs (tenant, created_at, id)
    WHERE parked AND state = 'queued';
CREATE INDEX jobs_tenant_on_queue ON jobs (tenant)
    WHERE NOT parked AND state IN ('queued', 'retrying', 'stalled', 'leased', 'running');
