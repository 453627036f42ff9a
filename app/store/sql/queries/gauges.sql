-- What GET /metrics reports at scrape time (app/store/gauges.py): jobs by state and kind,
-- each group's oldest job's age (the queued groups' give the oldest queued job). One
-- statement per scrape, across every tenant (the metrics carry no tenant).

-- name: gauges_jobs_by_state_and_kind
SELECT state::text AS state, kind, count(*) AS n,
       extract(epoch FROM now() - min(created_at))::float8 AS oldest_age
FROM jobs
GROUP BY state, kind;
