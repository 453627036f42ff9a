-- Per-tenant overrides of the admission limits.
-- Named queries of app/store/tenants.py. Each starts with "-- name: NAME"; app/store/sql
-- loads every file of this folder. Parameters are always bound (%(name)s), never
-- formatted into the text.

-- name: set_tenant_limits
-- Only the limits given change; the others keep their value (NULL: the default).
INSERT INTO tenant_limits AS t (tenant, rate_per_second, burst, max_in_flight, max_running)
VALUES (%(tenant)s, %(rate_per_second)s, %(burst)s, %(max_in_flight)s, %(max_running)s)
ON CONFLICT (tenant) DO UPDATE SET
    rate_per_second = coalesce(EXCLUDED.rate_per_second, t.rate_per_second),
    burst = coalesce(EXCLUDED.burst, t.burst),
    max_in_flight = coalesce(EXCLUDED.max_in_flight, t.max_in_flight),
    max_running = coalesce(EXCLUDED.max_running, t.max_running),
    updated_at = now()
RETURNING *;

-- name: clear_tenant_limits
DELETE FROM tenant_limits WHERE tenant = %(tenant)s RETURNING tenant;

-- name: list_tenant_limits
-- Every tenant that has a key or an override, with its overrides, its unfinished jobs,
-- those of them holding a live lease and those parked past its window on the queue.
SELECT names.tenant, t.rate_per_second, t.burst, t.max_in_flight, t.max_running,
       t.daily_tokens,
       (SELECT count(*) FROM jobs j
        WHERE j.tenant = names.tenant AND j.parked AND j.state = 'queued') AS parked,
       (SELECT count(*) FROM jobs j
        WHERE j.tenant = names.tenant
          AND j.state IN ('queued', 'leased', 'running', 'retrying', 'stalled')) AS in_flight,
       (SELECT count(*) FROM jobs j
        WHERE j.tenant = names.tenant AND j.state IN ('leased', 'running')
          AND j.lease_expires_at > now()) AS running
FROM (SELECT tenant FROM api_keys UNION SELECT tenant FROM tenant_limits) AS names
LEFT JOIN tenant_limits t ON t.tenant = names.tenant
ORDER BY names.tenant;
