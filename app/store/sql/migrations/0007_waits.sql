-- Waiting without a worker (docs/explain/design.md#waits): what a waiting job waits for, callbacks, child
-- jobs, and the functions that wake a job in the transaction that meets its condition.

ALTER TABLE jobs
    -- The job that spawned this one (ctx.spawn), and the spawn's key: once per parent.
    ADD COLUMN parent_id    uuid REFERENCES jobs (id) ON DELETE SET NULL,
    ADD COLUMN spawn_key    text,
    -- While waiting: 'timer' (until wake_at), 'callback' (wait_key, deadline in wake_at)
    -- or 'children' (the rule in wait_rule). Cleared when the job leaves `waiting`.
    ADD COLUMN wait_kind    text CHECK (wait_kind IN ('timer', 'callback', 'children')),
    ADD COLUMN wait_key     text,
    ADD COLUMN wake_at      timestamptz,
    ADD COLUMN wait_rule    jsonb,
    -- When a wake-up message was last sent for wake_at (the sweeper sends the ones SQS's
    -- 15-minute delay cannot carry, and re-sends lost ones).
    ADD COLUMN wake_sent_at timestamptz,
    ADD CONSTRAINT jobs_waiting_says_for_what CHECK (state <> 'waiting' OR wait_kind IS NOT NULL),
    ADD CONSTRAINT jobs_spawned_once UNIQUE (parent_id, spawn_key);

CREATE INDEX jobs_waking ON jobs (wake_at) WHERE state = 'waiting' AND wake_at IS NOT NULL;
CREATE INDEX jobs_children ON jobs (parent_id, created_at, id) WHERE parent_id IS NOT NULL;

-- A callback a job waits for: the token is the credential of its two routes, kept only
-- as a hash (SHA-256 of an unguessable token derived from the server secret).
CREATE TABLE callbacks (
    token_hash      bytea       PRIMARY KEY,
    job_id          uuid        NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    key             text        NOT NULL,
    state           text        NOT NULL DEFAULT 'pending'
                                CHECK (state IN ('pending', 'succeeded', 'failed', 'timed_out')),
    timeout_seconds integer     NOT NULL CHECK (timeout_seconds > 0),
    deadline        timestamptz NOT NULL,
    result          jsonb,
    error           text,
    heartbeats      integer     NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL DEFAULT now(),
    answered_at     timestamptz,
    CONSTRAINT callbacks_once_per_key UNIQUE (job_id, key)
);

-- Whether a gather's rule is decided by its children's states now: enough succeeded,
-- too many failed (dead-lettered or cancelled), or (waiting for all) every one finished.
-- app/kinds/waits.py evaluates the same rule in Python; both must agree.
CREATE FUNCTION gather_decided(rule jsonb) RETURNS boolean
LANGUAGE sql STABLE AS $$
    WITH c AS (
        SELECT count(*) AS n,
               count(*) FILTER (WHERE j.state = 'succeeded') AS ok,
               count(*) FILTER (WHERE j.state IN ('dead_lettered', 'cancelled')) AS failed
        FROM jsonb_array_elements_text(rule -> 'children') AS ids(id)
        JOIN jobs j ON j.id = ids.id::uuid
    )
    SELECT c.failed > (rule ->> 'tolerate')::int
           OR (CASE WHEN (rule ->> 'all')::boolean THEN c.ok + c.failed >= c.n
                    ELSE c.ok >= (rule ->> 'need')::int
                         OR c.n - c.failed < (rule ->> 'need')::int END)
    FROM c
$$;

-- Whether a waiting job was answered: its callback answered, its children's rule
-- decided. (A due timer or a passed deadline is the wake-up message's business.)
CREATE FUNCTION wait_answered(j jobs) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT j.state = 'waiting' AND (
        (j.wait_kind = 'callback' AND EXISTS (
                SELECT 1 FROM callbacks c
                WHERE c.job_id = j.id AND c.key = j.wait_key AND c.state <> 'pending'))
        OR (j.wait_kind = 'children' AND gather_decided(j.wait_rule)))
$$;

-- waiting -> queued with its outbox row, in the caller's transaction: the one way a job
-- is woken by something other than its own due message (an answer, a child, a race).
CREATE FUNCTION wake_job(job uuid, why text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    woken jobs;
BEGIN
    UPDATE jobs
    SET state = 'queued', wait_kind = NULL, wait_key = NULL, wake_at = NULL,
        wait_rule = NULL, wake_sent_at = NULL, updated_at = now()
    WHERE id = job AND state = 'waiting'
    RETURNING * INTO woken;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO job_events (job_id, from_state, to_state, attempt, detail)
    VALUES (job, 'waiting', 'queued', woken.attempt, why);
    INSERT INTO outbox (job_id) VALUES (job);
    RETURN true;
END
$$;

-- A child's finish (succeeded, dead-lettered, cancelled), by whatever path, wakes its
-- parent in the same transaction when the parent's gather has just become decided.
-- The parent's row is locked first, so a parent suspending at the same moment either
-- sees this child finished or is seen waiting here.
CREATE FUNCTION wake_parent_of_child() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    parent jobs;
BEGIN
    SELECT * INTO parent FROM jobs WHERE id = NEW.parent_id FOR UPDATE;
    IF FOUND AND parent.state = 'waiting' AND parent.wait_kind = 'children'
       AND parent.wait_rule -> 'children' ? NEW.id::text
       AND gather_decided(parent.wait_rule) THEN
        PERFORM wake_job(parent.id, 'children: ' || parent.wait_key || ' decided by ' || NEW.id);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_child_finished
AFTER UPDATE OF state ON jobs
FOR EACH ROW
WHEN (NEW.parent_id IS NOT NULL AND OLD.state IS DISTINCT FROM NEW.state
      AND NEW.state IN ('succeeded', 'dead_lettered', 'cancelled'))
EXECUTE FUNCTION wake_parent_of_child();

-- Cancelling a job cancels its unfinished children (and theirs, by the same trigger):
-- at once when no live lease holds them, else by asking their worker to stop. A child
-- locked at this moment (finishing, being claimed) is skipped rather than waited for (a
-- finishing child locks its parent: waiting could deadlock); the sweeper's
-- cancel_orphans catches it on its next pass.
CREATE FUNCTION cancel_children() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    WITH kids AS (
        SELECT id, state FROM jobs
        WHERE parent_id = NEW.id AND state NOT IN ('succeeded', 'dead_lettered', 'cancelled')
        ORDER BY id FOR UPDATE SKIP LOCKED
    ), done AS (
        UPDATE jobs j
        SET state = CASE WHEN j.state IN ('leased', 'running') AND j.lease_expires_at > now()
                         THEN j.state ELSE 'cancelled' END,
            cancel_requested = true,
            finished_at = CASE WHEN j.state IN ('leased', 'running') AND j.lease_expires_at > now()
                               THEN NULL ELSE now() END,
            lease_token = CASE WHEN j.state IN ('leased', 'running') AND j.lease_expires_at > now()
                               THEN j.lease_token END,
            lease_expires_at = CASE WHEN j.state IN ('leased', 'running') AND j.lease_expires_at > now()
                                    THEN j.lease_expires_at END,
            wait_kind = NULL, wait_key = NULL, wake_at = NULL, wait_rule = NULL,
            updated_at = now()
        FROM kids k
        WHERE j.id = k.id
        RETURNING j.id, k.state AS from_state, j.state AS to_state, j.attempt
    )
    INSERT INTO job_events (job_id, from_state, to_state, attempt, detail)
    SELECT id, from_state, 'cancelled', attempt, 'parent ' || NEW.id || ' cancelled'
    FROM done WHERE to_state = 'cancelled';
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_cancel_children
AFTER UPDATE OF state, cancel_requested ON jobs
FOR EACH ROW
WHEN ((NEW.state = 'cancelled' AND OLD.state IS DISTINCT FROM NEW.state)
      OR (NEW.cancel_requested AND NOT OLD.cancel_requested))
EXECUTE FUNCTION cancel_children();
