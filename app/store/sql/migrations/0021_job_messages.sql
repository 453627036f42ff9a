-- Messages to a job (docs/explain/design.md#messages): POST /v1/jobs/{id}/messages stores
-- one, in order per job and topic; ctx.receive(topic) consumes the oldest unread one as
-- a recorded step. A job waiting on a topic (wait_kind 'message', wait_key the topic) is
-- woken in the transaction that stores a message on it.

CREATE TABLE job_messages (
    -- The order of a job's messages: the sender holds the job's row while it inserts,
    -- so the ids of one job's messages are in the order they committed.
    id              bigserial   PRIMARY KEY,
    job_id          uuid        NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    topic           text        NOT NULL CHECK (char_length(topic) BETWEEN 1 AND 100),
    body            jsonb       NOT NULL,
    -- The sender's Idempotency-Key: a retried POST finds its message, not a new one.
    idempotency_key text        CHECK (char_length(idempotency_key) BETWEEN 1 AND 200),
    request_hash    text        NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    -- Set once, by the receive that consumed it: its effect key (receive:<topic>:<n>).
    consumed_at     timestamptz,
    consumed_by     text,
    CONSTRAINT job_messages_consumed_together
        CHECK ((consumed_at IS NULL) = (consumed_by IS NULL)),
    CONSTRAINT job_messages_once_per_key UNIQUE (job_id, idempotency_key),
    CONSTRAINT job_messages_consumed_once UNIQUE (job_id, consumed_by)
);

-- The next unread message of a job's topic (receive, and the wake check).
CREATE INDEX job_messages_unread ON job_messages (job_id, topic, id) WHERE consumed_at IS NULL;

ALTER TABLE jobs DROP CONSTRAINT jobs_wait_kind_check;
ALTER TABLE jobs ADD CONSTRAINT jobs_wait_kind_check
    CHECK (wait_kind IN ('timer', 'callback', 'children', 'message'));

-- As in 0007, and a message waiting unread on the topic a job waits on.
CREATE OR REPLACE FUNCTION wait_answered(j jobs) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT j.state = 'waiting' AND (
        (j.wait_kind = 'callback' AND EXISTS (
                SELECT 1 FROM callbacks c
                WHERE c.job_id = j.id AND c.key = j.wait_key AND c.state <> 'pending'))
        OR (j.wait_kind = 'children' AND gather_decided(j.wait_rule))
        OR (j.wait_kind = 'message' AND EXISTS (
                SELECT 1 FROM job_messages m
                WHERE m.job_id = j.id AND m.topic = j.wait_key AND m.consumed_at IS NULL)))
$$;
