-- Outgoing alerts (docs/explain/design.md#alerts, app/services/alerts.py): a row per event
-- an operator is told about, written in the transaction of the event itself, then
-- delivered (signed webhooks, EventBridge) by the sweeper with retries and backoff.
--
-- dedup_key names the event: one row per event however often the writing path runs
-- (`dead_lettered:<job>:<event id>`, `stalled:<job>:<event id>`,
-- `budget_exhausted:<tenant>:<day>`, `<condition>:<crossing>`). It is the webhook's
-- Webhook-Id too, so a receiver recognises a retry after a lost answer.
-- delivered lists the destinations that took the alert ('webhook', 'tenant_webhook',
-- 'eventbridge'): a retry goes only to the others. delivered_at: every destination done
-- (none configured counts as done); given_up_at: out of attempts.
-- job_id has no foreign key: an alert outlives its job's retention (alerts have their own).
CREATE TABLE alerts (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    dedup_key        text        NOT NULL UNIQUE CHECK (length(dedup_key) BETWEEN 1 AND 300),
    type             text        NOT NULL CHECK (type IN (
                         'job.dead_lettered', 'job.stalled', 'dlq.over_threshold',
                         'queue.oldest_over_threshold', 'tenant.budget_exhausted')),
    tenant           text,
    job_id           uuid,
    detail           jsonb       NOT NULL DEFAULT '{}',
    created_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    delivered        text[]      NOT NULL DEFAULT '{}',
    delivered_at     timestamptz,
    attempts         integer     NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    last_error       text,
    given_up_at      timestamptz
);

CREATE INDEX alerts_due ON alerts (next_attempt_at)
    WHERE delivered_at IS NULL AND given_up_at IS NULL;
CREATE INDEX alerts_created ON alerts (created_at DESC, id DESC);
CREATE INDEX alerts_tenant ON alerts (tenant, created_at DESC, id DESC);

-- A tenant's own webhook: its alerts (a job of its own dead-lettered or stalled, its token
-- budget used up) go there too, signed with its secret. Set by an admin
-- (`tasklease alerts set-webhook`, PUT /v1/alerts/webhooks/{tenant}).
CREATE TABLE tenant_alert_webhooks (
    tenant      text        PRIMARY KEY CHECK (length(tenant) BETWEEN 1 AND 100),
    url         text        NOT NULL CHECK (url ~ '^https?://' AND length(url) <= 2000),
    secret      text        NOT NULL CHECK (length(secret) BETWEEN 1 AND 200),
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- The deployment-wide threshold conditions (the DLQ's size, the oldest queued job's age):
-- whether each is over its threshold now, and how many times it crossed. An alert fires on
-- the statement that turns firing from false to true, keyed by the crossing's number, so
-- several sweepers at once still alert once per crossing.
CREATE TABLE alert_conditions (
    name        text        PRIMARY KEY,
    firing      boolean     NOT NULL DEFAULT false,
    crossings   integer     NOT NULL DEFAULT 0,
    value       double precision,
    changed_at  timestamptz NOT NULL DEFAULT now()
);

-- A job's transition to dead_lettered or stalled writes its alert in the same
-- transaction, whichever path made it (the engine, the sweeper's reconciliation or
-- deadline, mark_stalled): every transition appends its job_events row, so the alert is
-- keyed by that row and can neither be lost nor written twice for one transition.
CREATE FUNCTION alert_on_job_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO alerts (dedup_key, type, tenant, job_id, detail)
    SELECT NEW.to_state::text || ':' || NEW.job_id || ':' || NEW.id,
           'job.' || NEW.to_state::text, j.tenant, j.id,
           jsonb_build_object(
               'kind', j.kind, 'state', NEW.to_state::text,
               'from_state', NEW.from_state::text, 'attempt', NEW.attempt,
               'max_attempts', j.max_attempts, 'error', j.last_error,
               'dead_lettered_by', j.dead_lettered_by, 'detail', NEW.detail,
               'worker', NEW.worker, 'at', NEW.at, 'priority', j.priority)
    FROM jobs j WHERE j.id = NEW.job_id
    ON CONFLICT (dedup_key) DO NOTHING;
    RETURN NULL;
END $$;

CREATE TRIGGER job_events_alert AFTER INSERT ON job_events
    FOR EACH ROW
    WHEN (NEW.to_state IN ('dead_lettered', 'stalled')
          AND NEW.from_state IS DISTINCT FROM NEW.to_state)
    EXECUTE FUNCTION alert_on_job_event();
