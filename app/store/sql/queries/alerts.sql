-- Outgoing alerts (migration 0028): the delivery loop's queries, the threshold
-- conditions, the tenants' webhooks. Named queries of app/store/alerts.py. Parameters are
-- always bound (%(name)s), never formatted into the text.

-- name: take_due_alerts
-- Alerts not yet delivered whose next attempt is due, oldest first, locked for the
-- delivering transaction; SKIP LOCKED lets several sweepers share the work. The tenant's
-- webhook comes along (NULL: none).
SELECT a.id, a.dedup_key, a.type, a.tenant, a.job_id, a.detail, a.created_at,
       a.delivered, a.attempts, w.url AS tenant_url, w.secret AS tenant_secret
FROM alerts a LEFT JOIN tenant_alert_webhooks w ON w.tenant = a.tenant
WHERE a.delivered_at IS NULL AND a.given_up_at IS NULL AND a.next_attempt_at <= now()
ORDER BY a.next_attempt_at, a.id
LIMIT %(limit)s
FOR UPDATE OF a SKIP LOCKED;

-- name: record_alert_delivery
-- One alert's attempt: the destinations that took it join `delivered`; with none left
-- it is delivered, else the attempt is counted with its error and the next one is due
-- after the backoff, or, out of attempts, given up.
UPDATE alerts SET
    delivered = coalesce((SELECT array_agg(DISTINCT d ORDER BY d)
                          FROM unnest(delivered || %(took)s::text[]) AS d), ARRAY[]::text[]),
    delivered_at = CASE WHEN %(done)s THEN clock_timestamp() END,
    attempts = attempts + 1,
    last_error = CASE WHEN %(done)s THEN last_error ELSE %(error)s END,
    next_attempt_at = clock_timestamp() + make_interval(secs => %(backoff)s),
    given_up_at = CASE WHEN NOT %(done)s AND attempts + 1 >= %(max_attempts)s
                       THEN clock_timestamp() END
WHERE id = %(id)s;

-- name: list_alerts
-- The newest alerts first, of one tenant or (tenant NULL, all NULL) of every one; `type`
-- filters. Deployment-wide alerts (no tenant) are an admin's only.
SELECT id, dedup_key, type, tenant, job_id, detail, created_at, delivered, delivered_at,
       attempts, next_attempt_at, last_error, given_up_at
FROM alerts
WHERE (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
  AND (%(type)s::text IS NULL OR type = %(type)s)
ORDER BY created_at DESC, id DESC
LIMIT %(limit)s;

-- name: alert_condition
-- A threshold condition measured and, when it has just crossed (firing false -> true),
-- its alert written, in one statement: concurrent sweepers serialise on the condition's
-- row, so one crossing writes one alert. Back under the threshold re-arms it.
WITH c AS (
    INSERT INTO alert_conditions AS a (name, firing, crossings, value, changed_at)
    VALUES (%(name)s, %(over)s, CASE WHEN %(over)s THEN 1 ELSE 0 END, %(value)s, now())
    ON CONFLICT (name) DO UPDATE SET
        firing = EXCLUDED.firing,
        crossings = a.crossings + CASE WHEN EXCLUDED.firing THEN 1 ELSE 0 END,
        value = EXCLUDED.value,
        changed_at = now()
    WHERE a.firing IS DISTINCT FROM EXCLUDED.firing
    RETURNING a.crossings, a.firing
)
INSERT INTO alerts (dedup_key, type, detail)
SELECT %(name)s || ':' || c.crossings, %(type)s,
       %(detail)s::jsonb || jsonb_build_object('crossing', c.crossings)
FROM c WHERE c.firing
ON CONFLICT (dedup_key) DO NOTHING
RETURNING id;

-- name: dead_lettered_total
-- Dead-lettered jobs of every tenant, from the maintained counts (0018): no scan of jobs.
SELECT coalesce(sum(n), 0)::bigint AS n FROM (
    SELECT n FROM job_counts WHERE state = 'dead_lettered'
    UNION ALL
    SELECT n FROM job_count_deltas WHERE state = 'dead_lettered'
) AS parts;

-- name: oldest_queued_age
-- The oldest queued job's age in seconds (one probe of jobs_state_created, 0019); NULL
-- when nothing is queued.
SELECT extract(epoch FROM now() - created_at)::float8 AS age, id
FROM jobs WHERE state = 'queued' ORDER BY created_at LIMIT 1;

-- name: prune_alerts
-- Alerts done with (delivered or given up) older than the retention, a batch at a time.
DELETE FROM alerts WHERE id IN (
    SELECT id FROM alerts
    WHERE created_at < now() - make_interval(secs => %(keep)s)
      AND (delivered_at IS NOT NULL OR given_up_at IS NOT NULL)
    ORDER BY created_at LIMIT %(limit)s
);

-- name: set_tenant_alert_webhook
INSERT INTO tenant_alert_webhooks AS w (tenant, url, secret)
VALUES (%(tenant)s, %(url)s, %(secret)s)
ON CONFLICT (tenant) DO UPDATE
    SET url = EXCLUDED.url, secret = EXCLUDED.secret, updated_at = now()
RETURNING tenant, url, created_at, updated_at;

-- name: clear_tenant_alert_webhook
DELETE FROM tenant_alert_webhooks WHERE tenant = %(tenant)s RETURNING tenant;

-- name: list_tenant_alert_webhooks
-- The secrets stay in the table: nothing lists them.
SELECT tenant, url, created_at, updated_at FROM tenant_alert_webhooks ORDER BY tenant;
