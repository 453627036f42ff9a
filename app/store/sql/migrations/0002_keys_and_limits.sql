-- Who may call the API, and how much each tenant may ask of it.

-- API keys: one tenant each. The key itself is shown once at creation; only a salted
-- scrypt hash of its secret part is stored. The id is the public part of the key
-- (tlk_<id>_<secret>): it finds the row, and operators name it to revoke the key.
CREATE TABLE api_keys (
    id           text        PRIMARY KEY CHECK (id ~ '^[0-9a-f]{12}$'),
    tenant       text        NOT NULL CHECK (tenant ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$'),
    name         text        NOT NULL DEFAULT '' CHECK (length(name) <= 100),
    -- Operator scope: reads and redrives across tenants.
    admin        boolean     NOT NULL DEFAULT false,
    salt         bytea       NOT NULL,
    secret_hash  bytea       NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    revoked_at   timestamptz
);

CREATE INDEX api_keys_tenant ON api_keys (tenant, created_at);

-- Per-tenant overrides of the deployment's defaults (TASKLEASE_RATE_LIMIT_*,
-- TASKLEASE_MAX_JOBS_IN_FLIGHT); a NULL column means "the default".
CREATE TABLE tenant_limits (
    tenant           text             PRIMARY KEY,
    rate_per_second  double precision CHECK (rate_per_second > 0),
    burst            integer          CHECK (burst >= 1),
    max_in_flight    integer          CHECK (max_in_flight >= 1),
    updated_at       timestamptz      NOT NULL DEFAULT now()
);

-- The in-flight cap counts a tenant's unfinished jobs; the rate limit counts its newest
-- jobs (a sliding window over jobs.created_at); a job listing is per tenant.
CREATE INDEX jobs_tenant_in_flight ON jobs (tenant)
    WHERE state IN ('queued', 'leased', 'running', 'retrying', 'stalled');
CREATE INDEX jobs_tenant_created ON jobs (tenant, created_at DESC, id DESC);
