-- Charts over time (migration 0027, docs/explain/design.md#charts): the fold of the
-- appended changes into chart_buckets, a window's rows, and retention's prune.
-- Named queries of app/store/charts.py.

-- name: fold_chart_deltas
-- The appended rows, into every width at once, each tenant's and every tenant's together
-- (tenant '*'), by one folder at a time (the others skip: a fold is never waited for). A
-- reader sees each change either folded or appended.
WITH lock AS (
    SELECT pg_try_advisory_xact_lock(hashtext('tasklease_fold_chart_deltas')) AS got
), d AS (
    DELETE FROM chart_deltas WHERE (SELECT got FROM lock)
    RETURNING at, tenant, kind, series, bucket, n
), w AS (
    SELECT width, date_bin(make_interval(secs => width), d.at, timestamptz 'epoch') AS at,
           who.tenant, d.kind, d.series, d.bucket, sum(d.n) AS n
    FROM d CROSS JOIN (VALUES (60), (900), (3600)) AS widths (width)
           CROSS JOIN LATERAL (VALUES (d.tenant), ('*')) AS who (tenant)
    GROUP BY 1, 2, 3, 4, 5, 6
), up AS (
    INSERT INTO chart_buckets AS c (width, at, tenant, kind, series, bucket, n)
    SELECT width, at, tenant, kind, series, bucket, n FROM w
    ORDER BY width, tenant, at, kind, series, bucket
    ON CONFLICT (width, tenant, at, kind, series, bucket) DO UPDATE SET n = c.n + EXCLUDED.n
    RETURNING 1
)
SELECT (SELECT count(*) FROM d) AS folded;

-- name: chart_rows
-- One window at one width: the folded rows of the tenant (NULL: '*', every tenant) from
-- since on (one range of the primary key) plus the appended ones not folded yet, summed
-- by bucket start, kind, series and bucket.
SELECT at, kind, series, bucket, sum(n)::bigint AS n FROM (
    SELECT at, kind, series, bucket, n FROM chart_buckets
    WHERE width = %(width)s AND tenant = coalesce(%(tenant)s::text, '*') AND at >= %(since)s
      AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
    UNION ALL
    SELECT date_bin(make_interval(secs => %(width)s), at, timestamptz 'epoch'),
           kind, series, bucket, n FROM chart_deltas
    WHERE at >= %(since)s
      AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)
      AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
) AS parts
GROUP BY at, kind, series, bucket
ORDER BY at;

-- name: prune_chart_buckets
-- One width's rows older than its keep, a batch at a time (the primary key's range).
WITH doomed AS (
    SELECT ctid FROM chart_buckets
    WHERE width = %(width)s AND at < now() - make_interval(secs => %(keep)s)
    LIMIT %(limit)s
), gone AS (
    DELETE FROM chart_buckets WHERE ctid = ANY(ARRAY(SELECT ctid FROM doomed)) RETURNING 1
)
SELECT count(*) AS deleted FROM gone;
