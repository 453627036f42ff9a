-- Per-tenant concurrency while running (README "Who may do what"): at most N of a
-- tenant's jobs hold a live lease at once; TASKLEASE_MAX_RUNNING_PER_TENANT is the
-- default, this column a tenant's override (NULL: the default). The claim counts them
-- in its own statement, from the partial index below: no counter row, nothing locked.
ALTER TABLE tenant_limits ADD COLUMN max_running integer CHECK (max_running >= 1);

CREATE INDEX jobs_tenant_leased ON jobs (tenant, lease_expires_at)
    WHERE state IN ('leased', 'running');
