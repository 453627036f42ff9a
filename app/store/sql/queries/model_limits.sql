-- Model providers: a throttle that uses no attempt, the shared budget per provider and
-- model (a calendar minute's requests and tokens), and a tenant's tokens of a UTC day.
-- Named queries of app/store/model_limits.py.

-- name: throttle
-- Fenced: the provider throttled the job's call (429, 503 with Retry-After). Under the
-- cap: running -> retrying after the provider's delay, the attempt given back, the
-- throttle counted, and an event that says by whom. held: the token held the lease;
-- throttled: the transition took (held and under the cap); throttles: the count before.
WITH cur AS (
    SELECT id, throttles FROM jobs
    WHERE id = %(id)s AND lease_token = %(token)s AND state IN ('leased', 'running')
    FOR UPDATE
), done AS (
    UPDATE jobs j
    SET state = 'retrying', attempt = j.attempt - 1, throttles = j.throttles + 1,
        last_error = %(error)s,
        lease_expires_at = now() + make_interval(secs => %(delay)s),
        lease_token = NULL, updated_at = now()
    FROM cur
    WHERE j.id = cur.id AND cur.throttles < %(cap)s
    RETURNING j.id, j.attempt, j.lease_owner, j.throttles
), ev AS (
    INSERT INTO job_events (job_id, from_state, to_state, attempt, worker, detail)
    SELECT id, 'running', 'retrying', attempt, lease_owner,
           %(detail)s || ' (throttle ' || throttles::text || ' of ' || %(cap)s::text
           || ', no attempt used)'
    FROM done
)
SELECT (SELECT count(*) FROM cur) AS held, (SELECT count(*) FROM done) AS throttled,
       (SELECT throttles FROM cur) AS throttles;

-- name: reserve_model_budget
-- One statement: a request and its estimated tokens in this minute's row of the model,
-- only while both stay within the budget (the upsert's WHERE is checked on the locked,
-- latest row: concurrent callers never take more than the budget). minute: the minute
-- reserved in (NULL: over budget); wait: seconds until the next minute.
WITH now_minute AS (
    SELECT date_trunc('minute', now()) AS at
), took AS (
    INSERT INTO model_budget_minutes AS b (model, minute, requests, tokens)
    SELECT %(model)s, at, 1, %(tokens)s FROM now_minute
    WHERE 1 <= %(rpm)s AND %(tokens)s <= %(tpm)s
    ON CONFLICT (model, minute) DO UPDATE
        SET requests = b.requests + 1, tokens = b.tokens + EXCLUDED.tokens
        WHERE b.requests + 1 <= %(rpm)s AND b.tokens + EXCLUDED.tokens <= %(tpm)s
    RETURNING b.minute
)
SELECT (SELECT minute FROM took) AS minute,
       extract(epoch FROM at + interval '1 minute' - now())::float8 AS wait
FROM now_minute;

-- name: settle_model_budget
-- The reported tokens replace the estimate in the minute the call reserved in.
UPDATE model_budget_minutes SET tokens = greatest(0, tokens + %(delta)s)
WHERE model = %(model)s AND minute = %(minute)s;

-- name: reserve_tenant_tokens
-- One statement: the job's tenant's estimated tokens in its row of today (UTC), only
-- within its daily budget (its override, else the default). budget NULL: none applies,
-- nothing reserved. reserved NULL with a budget: over it until next_day (and the tenant's
-- budget alert written, once a day).
WITH t AS (
    SELECT j.tenant, coalesce(l.daily_tokens, %(default)s::bigint) AS budget,
           (now() AT TIME ZONE 'UTC')::date AS day
    FROM jobs j LEFT JOIN tenant_limits l ON l.tenant = j.tenant
    WHERE j.id = %(job_id)s
), took AS (
    INSERT INTO tenant_token_days AS d (tenant, day, tokens)
    SELECT tenant, day, %(tokens)s FROM t
    WHERE budget IS NOT NULL AND %(tokens)s <= budget
    ON CONFLICT (tenant, day) DO UPDATE
        SET tokens = d.tokens + EXCLUDED.tokens
        WHERE d.tokens + EXCLUDED.tokens <= (SELECT budget FROM t)
    RETURNING d.day
), alerted AS (
    -- Used up (not a call too big to ever fit): the tenant's alert for the day, written
    -- by the refused reservation's own statement, once per tenant and UTC day
    -- (migration 0028, app/services/alerts.py).
    INSERT INTO alerts (dedup_key, type, tenant, detail)
    SELECT 'budget_exhausted:' || t.tenant || ':' || t.day, 'tenant.budget_exhausted',
           t.tenant, jsonb_build_object('budget', t.budget, 'day', t.day,
                                        'job_id', %(job_id)s::uuid)
    FROM t
    WHERE t.budget IS NOT NULL AND %(tokens)s <= t.budget AND NOT EXISTS (SELECT 1 FROM took)
    ON CONFLICT (dedup_key) DO NOTHING
)
SELECT t.tenant, t.budget, t.day, (SELECT day FROM took) AS reserved,
       (t.day + 1)::timestamp AT TIME ZONE 'UTC' AS next_day
FROM t;

-- name: settle_tenant_tokens
UPDATE tenant_token_days SET tokens = greatest(0, tokens + %(delta)s)
WHERE tenant = %(tenant)s AND day = %(day)s;

-- name: any_tenant_daily_tokens
-- Whether any tenant has a daily token budget (a worker without one skips the round trip).
SELECT EXISTS (SELECT 1 FROM tenant_limits WHERE daily_tokens IS NOT NULL) AS any;

-- name: set_tenant_daily_tokens
-- A tenant's daily token budget (NULL: the default again); its other limits stay.
INSERT INTO tenant_limits AS t (tenant, daily_tokens) VALUES (%(tenant)s, %(daily_tokens)s)
ON CONFLICT (tenant) DO UPDATE SET daily_tokens = EXCLUDED.daily_tokens, updated_at = now()
RETURNING tenant, daily_tokens;

-- name: prune_model_budgets
-- Minutes older than an hour and days older than a week: nothing reads them any more.
WITH m AS (
    DELETE FROM model_budget_minutes WHERE minute < now() - interval '1 hour' RETURNING 1
), d AS (
    DELETE FROM tenant_token_days
    WHERE day < (now() AT TIME ZONE 'UTC')::date - 7 RETURNING 1
)
SELECT (SELECT count(*) FROM m) + (SELECT count(*) FROM d) AS pruned;
