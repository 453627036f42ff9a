-- Flat costs as the history grows (issue 18): the listings filtered by state and the
-- dead letters read only the rows of the page they show, and the sweeper's look for
-- orphans reads only unfinished children, however many finished jobs are kept.
-- Plain CREATE INDEX: migrations run in a transaction (app/store/pool.py).

-- GET /v1/jobs?state=... for a tenant, and across tenants (the operator's view), newest
-- first from the cursor on: before, a walk of the tenant's (or everyone's) newest jobs
-- skipping other states, or every row of the state sorted (a bitmap over the tenant's).
CREATE INDEX jobs_tenant_state_created ON jobs (tenant, state, created_at DESC, id DESC);
CREATE INDEX jobs_state_created ON jobs (state, created_at DESC, id DESC);

-- GET /v1/dead-letters, oldest first (finished_at, id), a tenant's or everyone's: the
-- page read in order, not every dead letter read and sorted. (0018's jobs_finished is
-- partial on finished_at IS NOT NULL, which the listing's WHERE does not imply.)
CREATE INDEX jobs_dead_letters ON jobs (finished_at, id) WHERE state = 'dead_lettered';
CREATE INDEX jobs_tenant_dead_letters ON jobs (tenant, finished_at, id)
    WHERE state = 'dead_lettered';

-- The sweeper's cancel_orphans: unfinished children only (it walked every child ever
-- spawned, finished ones included, and filtered them).
CREATE INDEX jobs_unfinished_children ON jobs (parent_id)
    WHERE parent_id IS NOT NULL
      AND state IN ('queued', 'leased', 'running', 'retrying', 'stalled', 'waiting');

-- The sweeper's stuck_waits: the waits an answer or a child can decide (a timer never
-- is), not every sleeper.
CREATE INDEX jobs_waiting_for_answer ON jobs (updated_at)
    WHERE state = 'waiting' AND wait_kind IN ('callback', 'children');

