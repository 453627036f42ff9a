-- What GET /metrics reports at scrape time (app/store/gauges.py): jobs by state and kind,
-- and the oldest queued job's age. The counts are maintained (migration 0018: job_counts
-- plus the changes not folded into it yet), so a scrape costs the same at any size of
-- the history; the age is one index probe.

-- name: gauges_jobs_by_state_and_kind
WITH c AS (
    SELECT kind, state, sum(n) AS n FROM (
        SELECT kind, state, n FROM job_counts
        UNION ALL
        SELECT kind, state, n FROM job_count_deltas
    ) AS parts
    GROUP BY kind, state
    HAVING sum(n) <> 0
)
SELECT c.state::text AS state, c.kind, c.n,
       -- The oldest queued job of any kind: one probe of jobs_state_created (0019).
       (SELECT extract(epoch FROM now() - j.created_at)::float8 FROM jobs j
        WHERE j.state = 'queued' ORDER BY j.created_at LIMIT 1) AS oldest_age
FROM c;

-- name: fold_job_counts
-- The appended changes folded into job_counts, by one folder at a time (the others skip:
-- a fold is never waited for). Rows appended after this statement's snapshot stay for
-- the next fold; a reader sees every change either folded or appended, never both.
WITH lock AS (
    SELECT pg_try_advisory_xact_lock(hashtext('tasklease_fold_job_counts')) AS got
), d AS (
    DELETE FROM job_count_deltas WHERE (SELECT got FROM lock) RETURNING tenant, kind, state, n
), s AS (
    SELECT tenant, kind, state, sum(n) AS n FROM d GROUP BY tenant, kind, state
), up AS (
    INSERT INTO job_counts AS c (tenant, kind, state, n)
    SELECT tenant, kind, state, n FROM s ORDER BY tenant, kind, state
    ON CONFLICT (tenant, kind, state) DO UPDATE SET n = c.n + EXCLUDED.n
    RETURNING 1
)
SELECT (SELECT count(*) FROM d) AS folded;

-- name: counts_by_kind
-- Jobs by kind and state (a tenant's, or every tenant's for NULL), for GET /v1/kinds:
-- the maintained counts plus the changes not folded yet, never a scan of jobs.
SELECT kind, state::text AS state, sum(n)::bigint AS n FROM (
    SELECT kind, state, n FROM job_counts
    WHERE %(tenant)s::text IS NULL OR tenant = %(tenant)s::text
    UNION ALL
    SELECT kind, state, n FROM job_count_deltas
    WHERE %(tenant)s::text IS NULL OR tenant = %(tenant)s::text
) AS parts
GROUP BY kind, state
HAVING sum(n) <> 0;
