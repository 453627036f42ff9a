-- Schedules: a cron expression in a time zone that makes a job of a kind, with a payload,
-- at each of its slots (docs/explain/design.md#schedules). The sweeper makes each due slot's job through
-- the submit path, with the idempotency key 'schedule:<id>:<slot>', in the transaction
-- that moves next_slot on: exactly one job per slot, however many sweepers run.
CREATE TABLE schedules (
    id               uuid        PRIMARY KEY,
    tenant           text        NOT NULL CHECK (tenant ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$'),
    -- Optional; a tenant's names are unique (NULLs are distinct: unnamed ones are many).
    name             text        CHECK (length(name) BETWEEN 1 AND 100),
    -- Five fields, as validated by the cron library (app/services/cron.py).
    cron             text        NOT NULL CHECK (length(cron) BETWEEN 1 AND 100),
    -- An IANA time zone name (zoneinfo): the cron's fields are read in it.
    timezone         text        NOT NULL CHECK (length(timezone) BETWEEN 1 AND 100),
    kind             text        NOT NULL,
    payload          jsonb       NOT NULL,
    -- NULL: the kind's or the deployment's default when the job is made.
    max_attempts     integer     CHECK (max_attempts BETWEEN 1 AND 100),
    timeout_seconds  integer     CHECK (timeout_seconds BETWEEN 1 AND 43200),
    enabled          boolean     NOT NULL DEFAULT true,
    -- The first slot not yet made; NULL when the cron has no slot left.
    next_slot        timestamptz,
    -- The last slot made, and its job (NULL: none yet).
    last_slot        timestamptz,
    last_job_id      uuid        REFERENCES jobs (id) ON DELETE SET NULL,
    -- Why the last due slot made no job (an unknown kind, a payload the kind now
    -- refuses, the tenant over its limits); NULL once a slot made its job.
    last_error       text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT schedules_name UNIQUE (tenant, name)
);

-- The sweeper's question every pass: which enabled schedules have a slot due.
CREATE INDEX schedules_due ON schedules (next_slot) WHERE enabled;
CREATE INDEX schedules_tenant ON schedules (tenant, created_at DESC, id DESC);
