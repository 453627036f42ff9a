-- Charts over time (issue 33, docs/explain/design.md#charts): jobs submitted, succeeded,
-- failed (an attempt that ended retrying or stalled) and dead-lettered, and a histogram of
-- their latency, by tenant, kind and time bucket. Maintained on the path of the state
-- counts (0018): statement-level triggers with transition tables append one row per
-- (minute, tenant, kind, series, bucket) a statement moved to chart_deltas, never an
-- update, so concurrent transactions never wait on a shared row; the fold
-- (app/store/charts.py) moves them into chart_buckets at three widths, and GET /v1/charts
-- reads those plus what is not folded yet. No page load scans jobs.

-- series: submitted, succeeded, failed, dead_lettered (bucket 0, n jobs), or latency
-- (created_at to finished_at) and run (started_at, the first start, to finished_at) of
-- the jobs that finished (succeeded or dead-lettered): bucket = chart_bucket(seconds).
CREATE TABLE chart_deltas (
    at      timestamptz NOT NULL,  -- the minute
    tenant  text        NOT NULL,
    kind    text        NOT NULL,
    series  text        NOT NULL,
    bucket  smallint    NOT NULL,
    n       bigint      NOT NULL
);

-- width: 60 (the hour's chart), 900 (the day's) or 3600 (the week's) seconds; at: the
-- bucket's start. tenant '*' (no tenant's name: bounds.TENANT_PATTERN) holds every tenant
-- together, written by the fold beside each tenant's rows, so an admin's read is one
-- range of the key as a tenant's is, however many tenants there are. Retention
-- (app/services/retention.py) deletes a width's old rows, found by chart_buckets_at.
CREATE TABLE chart_buckets (
    width   integer     NOT NULL CHECK (width IN (60, 900, 3600)),
    at      timestamptz NOT NULL,
    tenant  text        NOT NULL,
    kind    text        NOT NULL,
    series  text        NOT NULL,
    bucket  smallint    NOT NULL,
    n       bigint      NOT NULL,
    PRIMARY KEY (width, tenant, at, kind, series, bucket)
);
-- Built in the transaction: the table is new and empty (0025's note on bulk_operations).
CREATE INDEX chart_buckets_at ON chart_buckets (width, at);

-- A fixed log scale, four buckets a decade: bucket k >= 1 holds [10 ms * 10^(k/4),
-- 10 ms * 10^((k+1)/4)) seconds, bucket 0 everything under 17.8 ms, bucket 28 from
-- 100000 s (27.8 h) up. app/services/charts.py holds the same edges.
CREATE FUNCTION chart_bucket(seconds double precision) RETURNS smallint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT least(28, greatest(0, floor(4 * log(greatest(seconds, 0.01) / 0.01))))::smallint
$$;

CREATE FUNCTION chart_jobs_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO chart_deltas (at, tenant, kind, series, bucket, n)
    SELECT date_bin('1 minute', created_at, timestamptz 'epoch'), tenant, kind, 'submitted', 0,
           count(*)
    FROM new_rows GROUP BY 1, 2, 3;
    RETURN NULL;
END
$$;

-- Only a statement that moved a job into succeeded, dead_lettered, retrying or stalled
-- appends; a claim, a heartbeat or a start (most statements) stops at the first check.
CREATE FUNCTION chart_jobs_updated() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM new_rows
                   WHERE state IN ('succeeded', 'dead_lettered', 'retrying', 'stalled')) THEN
        RETURN NULL;
    END IF;
    WITH moved AS (
        SELECT n.tenant, n.kind,
               CASE WHEN n.state IN ('retrying', 'stalled') THEN 'failed'
                    ELSE n.state::text END AS series,
               date_bin('1 minute', coalesce(n.finished_at, now()), timestamptz 'epoch') AS at,
               CASE WHEN n.state IN ('succeeded', 'dead_lettered') THEN
                   extract(epoch FROM n.finished_at - n.created_at)::float8 END AS latency,
               CASE WHEN n.state IN ('succeeded', 'dead_lettered') THEN
                   extract(epoch FROM n.finished_at - n.started_at)::float8 END AS run
        FROM new_rows n JOIN old_rows o ON o.id = n.id
        WHERE n.state IN ('succeeded', 'dead_lettered', 'retrying', 'stalled')
          AND o.state IS DISTINCT FROM n.state
    )
    INSERT INTO chart_deltas (at, tenant, kind, series, bucket, n)
    SELECT at, tenant, kind, series, 0, count(*) FROM moved GROUP BY 1, 2, 3, 4
    UNION ALL
    SELECT at, tenant, kind, 'latency', chart_bucket(latency), count(*) FROM moved
    WHERE latency IS NOT NULL GROUP BY 1, 2, 3, 5
    UNION ALL
    SELECT at, tenant, kind, 'run', chart_bucket(run), count(*) FROM moved
    WHERE run IS NOT NULL GROUP BY 1, 2, 3, 5;
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_chart_inserted AFTER INSERT ON jobs
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION chart_jobs_inserted();
CREATE TRIGGER jobs_chart_updated AFTER UPDATE ON jobs
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION chart_jobs_updated();
