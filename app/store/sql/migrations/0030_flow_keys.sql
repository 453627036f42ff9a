-- Flow control by key (docs/howto/flow-control.md): a job may carry a key (tenant and
-- kind scoped), and its kind's limits per key, written on the job at its submission so
-- the claim decides from the row alone.
--
-- Expand only: nullable columns without a default (no table rewrite), their checks NOT
-- VALID (rows written from now on are checked; the existing ones, all NULL there, are
-- not scanned under the lock). Code from before this migration never names them.
-- jobs.flow_key: the job's key (given at submission, or computed by its kind from the
-- payload); NULL: none, no limit by key applies.
-- jobs.key_concurrency: at most this many jobs of the key (same tenant and kind) hold it
-- at once; a job holds its key from its first claim until it ends (a wait or a retry
-- keeps it). NULL: no limit.
-- jobs.key_rate / key_rate_seconds: at most key_rate of the key's jobs are claimed in any
-- key_rate_seconds. NULL: no limit.
-- jobs.key_claimed_at: the job's latest claim, which the rate counts.
ALTER TABLE jobs ADD COLUMN flow_key text;
ALTER TABLE jobs ADD CONSTRAINT jobs_flow_key_length
    CHECK (length(flow_key) BETWEEN 1 AND 200) NOT VALID;
ALTER TABLE jobs ADD COLUMN key_concurrency integer;
ALTER TABLE jobs ADD CONSTRAINT jobs_key_concurrency_positive
    CHECK (key_concurrency >= 1) NOT VALID;
ALTER TABLE jobs ADD COLUMN key_rate integer;
ALTER TABLE jobs ADD COLUMN key_rate_seconds double precision;
ALTER TABLE jobs ADD CONSTRAINT jobs_key_rate_positive
    CHECK (key_rate >= 1 AND key_rate_seconds > 0) NOT VALID;
ALTER TABLE jobs ADD COLUMN key_claimed_at timestamptz;

-- The key's jobs that are not finished, in order (the claim's and the release's count of
-- the jobs ahead of one), a key's jobs by tenant (search), and the key's recent claims
-- (the rate). Only keyed rows are
-- indexed. Built CONCURRENTLY, outside the transaction: jobs takes writes while they build.
-- tasklease: no-transaction
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_flow_key_open
    ON jobs (tenant, kind, flow_key, created_at)
    WHERE flow_key IS NOT NULL
      AND state IN ('queued', 'leased', 'running', 'waiting', 'retrying', 'stalled');
-- Search by key (GET /v1/jobs?key=): every keyed job, finished ones included.
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_flow_key
    ON jobs (tenant, flow_key, created_at)
    WHERE flow_key IS NOT NULL;
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_flow_key_claimed
    ON jobs (tenant, kind, flow_key, key_claimed_at)
    WHERE flow_key IS NOT NULL AND key_rate IS NOT NULL;
