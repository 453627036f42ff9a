-- Model providers (docs/explain/design.md#throttles): throttles that use no
-- attempt, a shared budget per provider and model, and a per-tenant token budget a day.

-- How often the job's provider throttled it (429, 503 with Retry-After): a throttle gives
-- its attempt back, so this count, capped by TASKLEASE_MAX_THROTTLES, is what ends a job
-- whose provider never stops throttling. A constant default: ADD COLUMN rewrites nothing.
ALTER TABLE jobs ADD COLUMN throttles integer NOT NULL DEFAULT 0;

-- A model's use in one calendar minute (UTC), across every worker process and Lambda:
-- a call reserves a request and its estimated tokens before it goes out (a conditional
-- upsert that holds only under TASKLEASE_MODEL_BUDGETS) and settles the tokens with the
-- usage its provider reported. Old minutes are pruned by the sweeper.
CREATE TABLE model_budget_minutes (
    model     text        NOT NULL,  -- "provider/model", as TASKLEASE_MODEL_BUDGETS names it
    minute    timestamptz NOT NULL,
    requests  integer     NOT NULL DEFAULT 0 CHECK (requests >= 0),
    tokens    bigint      NOT NULL DEFAULT 0 CHECK (tokens >= 0),
    PRIMARY KEY (model, minute)
);

-- A tenant's model tokens of one UTC day, reserved and settled as above, against its
-- daily budget: tenant_limits.daily_tokens, else TASKLEASE_TENANT_DAILY_TOKENS.
CREATE TABLE tenant_token_days (
    tenant  text   NOT NULL,
    day     date   NOT NULL,
    tokens  bigint NOT NULL DEFAULT 0 CHECK (tokens >= 0),
    PRIMARY KEY (tenant, day)
);

ALTER TABLE tenant_limits ADD COLUMN daily_tokens bigint CHECK (daily_tokens >= 1);
