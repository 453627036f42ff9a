-- Waits: suspending a job, waking it, its callbacks and its children.
-- Named queries of app/store/waits.py. Each starts with "-- name: NAME"; app/store/sql
-- loads every file of this folder. Parameters are always bound (%(name)s), never
-- formatted into the text.

-- name: suspend
-- Fenced: the lease holder's run ends with the job waiting (the attempt given back:
-- attempts count failures, not waits). wake_sent_at is set when the caller sends the
-- wake-up now (due within SQS's delay cap). Every wait, of any kind, is bounded by the
-- run's deadline (migration 0022): it wakes at the deadline at the latest (least()
-- ignores a NULL), and the claim then ends the job.
WITH done AS (
    UPDATE jobs j
    SET state = 'waiting', attempt = j.attempt - 1,
        wait_kind = %(wait_kind)s, wait_key = %(wait_key)s,
        wake_at = least(%(wake_at)s::timestamptz, j.deadline),
        wait_rule = %(rule)s,
        wake_sent_at = CASE WHEN least(%(wake_at)s::timestamptz, j.deadline)
                                 <= now() + make_interval(secs => %(cap)s)
                            THEN now() END,
        lease_token = NULL, lease_expires_at = NULL, updated_at = now()
    WHERE j.id = %(id)s AND j.lease_token = %(token)s AND j.state IN ('leased', 'running')
    RETURNING j.id, j.attempt, j.lease_owner, j.wake_sent_at IS NOT NULL AS send_now,
              j.cancel_requested, j.tenant,
              greatest(0, extract(epoch FROM j.wake_at - now()))::float8 AS delay
), ev AS (
    INSERT INTO job_events (job_id, from_state, to_state, attempt, worker, detail)
    SELECT id, 'running', 'waiting', attempt, lease_owner, %(detail)s FROM done
)
-- has_parked: the tenant has parked jobs, one of which the lease this wait frees may
-- release now (a child spawned parked behind its waiting parent, say).
SELECT send_now, cancel_requested, delay,
       EXISTS (SELECT 1 FROM jobs p WHERE p.tenant = done.tenant AND p.parked
               AND p.state = 'queued') AS has_parked
FROM done;

-- name: wake_if_met
-- In the suspending transaction, after the row is locked by `suspend`: a condition met
-- meanwhile (an answer, a child that finished) wakes the job at once.
SELECT wake_job(j.id, 'woken at once: ' || %(why)s) AS woken
FROM jobs j
WHERE j.id = %(id)s AND j.state = 'waiting'
  AND wait_answered(j);

-- name: unsent_of_job
-- The newest unsent row only: the one the waking write just made. An older unsent row
-- may be one a long-running API sent and will mark in a moment (services/outbox.py's
-- SendRecords), and sending it again would be a second message; one message is all a
-- job needs, and a row that really was not sent is the relay's.
SELECT o.id, o.job_id, j.trace_context, j.tenant, j.priority
FROM outbox o LEFT JOIN jobs j ON j.id = o.job_id
WHERE o.job_id = %(id)s AND o.sent_at IS NULL ORDER BY o.id DESC LIMIT 1;

-- name: due_wakeups
-- Waiting jobs that need a wake-up message now: due within SQS's delay cap and none
-- sent for this due time, or overdue past the grace with the last one lost.
UPDATE jobs j SET wake_sent_at = now()
FROM (SELECT id FROM jobs
      WHERE state = 'waiting' AND wake_at IS NOT NULL AND NOT cancel_requested
        -- Implied by either case below (the grace and the cap are not negative), stated
        -- so that the timers index is read as a range up to it, not every sleeper.
        AND wake_at <= now() + make_interval(secs => %(cap)s)
        AND ((wake_sent_at IS NULL AND wake_at <= now() + make_interval(secs => %(cap)s))
             -- Overdue and lost: re-sent after the grace, then less and less often (each
             -- wait at least as long as the job was overdue at the last send), so a
             -- backlog of sleepers is not re-sent every sweep while the workers are down.
             OR (wake_at < now() - make_interval(secs => %(grace)s)
                 AND wake_sent_at < now() - make_interval(secs => %(grace)s)
                                    - greatest(interval '0', wake_sent_at - wake_at)))
      ORDER BY wake_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED) due
WHERE j.id = due.id
RETURNING j.id, j.tenant, j.priority,
          greatest(0, extract(epoch FROM j.wake_at - now()))::float8 AS delay;

-- name: early_wakeup
-- A wake-up that came before its due time: the caller re-sends it with the delay left
-- (due within the cap) or leaves it to the sweeper (wake_sent_at cleared). One that raced
-- the due time (the claim's clock just before it, this one's just after) is re-sent at
-- once (delay 0), not dropped.
UPDATE jobs
SET wake_sent_at = CASE WHEN wake_at <= now() + make_interval(secs => %(cap)s) THEN now() END
WHERE id = %(id)s AND state = 'waiting' AND wake_at IS NOT NULL AND NOT cancel_requested
RETURNING wake_sent_at IS NOT NULL AS send_now,
          greatest(0, extract(epoch FROM wake_at - now()))::float8 AS delay;

-- name: open_callback
-- Fenced by the lease; once per (job, key): a second open returns the first (and keeps
-- the first's details).
WITH made AS (
    INSERT INTO callbacks (token_hash, job_id, key, timeout_seconds, deadline, details)
    SELECT %(token_hash)s, j.id, %(key)s, %(timeout)s, now() + make_interval(secs => %(timeout)s),
           %(details)s
    FROM jobs j
    WHERE j.id = %(id)s AND j.lease_token = %(token)s AND j.state = 'running'
    ON CONFLICT (job_id, key) DO NOTHING
    RETURNING created_at, token_hash
)
SELECT created_at, token_hash FROM made
UNION ALL
SELECT created_at, token_hash FROM callbacks WHERE job_id = %(id)s AND key = %(key)s;

-- name: callback_of_job
SELECT * FROM callbacks WHERE job_id = %(id)s AND key = %(key)s;

-- name: time_out_callback
UPDATE callbacks SET state = 'timed_out', answered_at = now()
WHERE job_id = %(id)s AND key = %(key)s AND state = 'pending' AND deadline <= now()
RETURNING *;

-- name: lock_job_of_callback
-- First in the answering transaction: the job's row, the one lock a suspending job also
-- takes, so the answer and the suspension see each other (whichever commits second sees
-- the first; READ COMMITTED gives the next statement a fresh snapshot).
SELECT j.id FROM jobs j JOIN callbacks c ON c.job_id = j.id
WHERE c.token_hash = %(token_hash)s
FOR UPDATE OF j;

-- name: answer_callback
-- The first answer before the deadline wins; the job waiting on it wakes in the same
-- transaction (after lock_job_of_callback). A callback of a job that ended (succeeded,
-- cancelled) takes no answer: nobody would read it.
WITH answered AS (
    UPDATE callbacks c
    SET state = %(state)s, result = %(result)s, error = %(error)s, answered_at = now()
    WHERE c.token_hash = %(token_hash)s AND c.state = 'pending' AND c.deadline > now()
      AND EXISTS (SELECT 1 FROM jobs j
                  WHERE j.id = c.job_id AND j.state NOT IN ('succeeded', 'cancelled'))
    RETURNING c.job_id, c.key
)
SELECT a.job_id, a.key,
       (SELECT wake_job(j.id, 'callback ' || a.key || ' answered: ' || %(state)s)
        FROM jobs j
        WHERE j.id = a.job_id AND j.state = 'waiting' AND j.wait_kind = 'callback'
          AND j.wait_key = a.key) AS woken
FROM answered a;

-- name: heartbeat_callback
-- Push a pending callback's deadline by its timeout; a job waiting on it waits longer
-- (its early wake-up message is re-delayed when it comes).
WITH beat AS (
    UPDATE callbacks c
    SET deadline = now() + make_interval(secs => c.timeout_seconds), heartbeats = c.heartbeats + 1
    WHERE c.token_hash = %(token_hash)s AND c.state = 'pending' AND c.deadline > now()
      AND EXISTS (SELECT 1 FROM jobs j
                  WHERE j.id = c.job_id AND j.state NOT IN ('succeeded', 'cancelled'))
    RETURNING c.job_id, c.key, c.deadline
), job AS (
    UPDATE jobs j SET wake_at = b.deadline, wake_sent_at = NULL, updated_at = now()
    FROM beat b
    WHERE j.id = b.job_id AND j.state = 'waiting' AND j.wait_kind = 'callback'
      AND j.wait_key = b.key
)
SELECT job_id, key, deadline FROM beat;

-- name: callback_by_token
SELECT c.*, j.tenant FROM callbacks c JOIN jobs j ON j.id = c.job_id
WHERE c.token_hash = %(token_hash)s;

-- name: spawn_child
-- Fenced by the parent's lease; once per (parent, key). Same tenant and priority as the
-- parent (a high-priority job's children are served first too). The child counts
-- against its tenant and its key as a submitted job does (issue 35): it carries its key
-- and its kind's limits per key (the claim holds it to them), and past the tenant's
-- window on the queue (its running cap x window_per_slot, as insert_jobs counts it) it is
-- written parked, with no outbox row: a lease of the tenant that ends releases it.
-- A child on the key one of its ancestors holds (same kind and key) runs within that
-- hold, with no key_concurrency of its own: the ancestor waits on it holding the key, so
-- waiting for the key would wait forever. Later jobs of the key still count it ahead.
WITH RECURSIVE above AS (
    SELECT a.id, a.parent_id, a.kind, a.flow_key, 1 AS depth FROM jobs a WHERE a.id = %(id)s
    UNION ALL
    SELECT a.id, a.parent_id, a.kind, a.flow_key, above.depth + 1
    FROM jobs a JOIN above ON a.id = above.parent_id
    WHERE above.depth < 100
), parent AS (
    SELECT p.id, p.tenant, p.priority,
           EXISTS (SELECT 1 FROM above WHERE above.kind = %(kind)s
                   AND above.flow_key = %(flow_key)s::text) AS key_held_above
    FROM jobs p
    WHERE p.id = %(id)s AND p.lease_token = %(token)s AND p.state = 'running'
), win AS (
    SELECT coalesce(t.max_running, %(max_running)s::int) * %(window_per_slot)s::int AS queue_window
    FROM parent LEFT JOIN tenant_limits t ON t.tenant = parent.tenant
), on_queue AS (
    -- Counted up to the window only, from its own partial index.
    SELECT count(*) AS n FROM (
        SELECT 1 FROM jobs j
        WHERE j.tenant = (SELECT tenant FROM parent) AND NOT j.parked
          AND j.state IN ('queued', 'retrying', 'stalled', 'leased', 'running')
        LIMIT (SELECT queue_window FROM win)
    ) AS sent
), made AS (
    INSERT INTO jobs (id, tenant, kind, payload, max_attempts, timeout_seconds,
                      request_hash, parent_id, spawn_key, trace_context, priority, parked,
                      flow_key, key_concurrency, key_rate, key_rate_seconds)
    SELECT %(child)s, p.tenant, %(kind)s, %(payload)s, %(max_attempts)s, %(timeout)s,
           %(request_hash)s, p.id, %(key)s, %(trace_context)s, p.priority,
           (SELECT n FROM on_queue) >= (SELECT queue_window FROM win),
           %(flow_key)s,
           CASE WHEN NOT p.key_held_above THEN %(key_concurrency)s::int END,
           %(key_rate)s, %(key_rate_seconds)s
    FROM parent p
    ON CONFLICT (parent_id, spawn_key) DO NOTHING
    RETURNING id, attempt, tenant, priority, parked
), ev AS (
    INSERT INTO job_events (job_id, from_state, to_state, attempt, detail)
    SELECT id, NULL, 'queued', 0,
           'spawned by ' || %(id)s::text
           || CASE WHEN parked THEN ', parked: the tenant''s window on the queue is full '
                                    '(its running cap x TASKLEASE_QUEUE_WINDOW_PER_SLOT), sent '
                                    'when one of its leases ends'
                   ELSE '' END
    FROM made
), box AS (
    INSERT INTO outbox (job_id) SELECT id FROM made WHERE NOT parked RETURNING id, job_id
)
SELECT box.id, made.id AS job_id, true AS made, made.tenant, made.priority
FROM made LEFT JOIN box ON box.job_id = made.id
UNION ALL
SELECT NULL, id, false, tenant, priority FROM jobs WHERE parent_id = %(id)s AND spawn_key = %(key)s;

-- name: children_states
SELECT id, parent_id, state, result, last_error FROM jobs WHERE id = ANY(%(ids)s::uuid[]);

-- name: children_of
-- A job's children, oldest first (the API and `jobs show`).
SELECT * FROM jobs WHERE parent_id = %(id)s ORDER BY created_at, id LIMIT %(limit)s;

-- name: cancel_orphans
-- Children left unfinished under a cancelled parent (the cancelling trigger skips a
-- child locked at that moment): cancelled now, or asked to stop under a live lease.
WITH orphans AS (
    SELECT c.id, c.state FROM jobs c JOIN jobs p ON p.id = c.parent_id
    WHERE p.state = 'cancelled'
      -- The unfinished states, named (not NOT IN the finished ones): so the partial
      -- index of unfinished children (migration 0019) serves it.
      AND c.parent_id IS NOT NULL
      AND c.state IN ('queued', 'leased', 'running', 'retrying', 'stalled', 'waiting')
      AND NOT (c.cancel_requested AND c.state IN ('leased', 'running'))
    ORDER BY c.id LIMIT %(limit)s FOR UPDATE OF c SKIP LOCKED
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
        wait_kind = NULL, wait_key = NULL, wake_at = NULL, wait_rule = NULL, updated_at = now()
    FROM orphans o
    WHERE j.id = o.id
    RETURNING j.id, o.state AS from_state, j.state AS to_state, j.attempt, j.kind, j.created_at
), ev AS (
    INSERT INTO job_events (job_id, from_state, to_state, attempt, detail)
    SELECT id, from_state, 'cancelled', attempt, 'parent cancelled' FROM done
    WHERE to_state = 'cancelled'
)
-- What app/store/endings.py counts (an orphan under a live lease is only asked to stop);
-- cascade: the cancelling trigger's work below each of them.
SELECT id, kind, created_at, to_state::text AS to_state,
       EXISTS (SELECT 1 FROM jobs c WHERE c.parent_id = done.id) AS cascade
FROM done;

-- name: stuck_waits
-- Waiting jobs whose condition is met but which are still waiting past the grace
-- (a wake lost to a crash between two statements cannot happen; this is the check
-- the chaos report and the sweeper make): woken now.
SELECT j.id, wake_job(j.id, 'woken by the sweeper: condition met') AS woken
FROM jobs j
WHERE j.state = 'waiting'
  -- A timer is never answered (wait_answered): the sleepers are not each looked into.
  AND j.wait_kind IN ('callback', 'children') AND wait_answered(j)
  AND j.updated_at < now() - make_interval(secs => %(grace)s)
LIMIT %(limit)s;

-- name: callbacks_of_job
-- A job's callbacks, oldest first (the API and `jobs show`; never their token hashes).
SELECT * FROM callbacks WHERE job_id = %(id)s ORDER BY created_at, key LIMIT %(limit)s;

-- name: count_children
SELECT count(*) AS n FROM jobs WHERE parent_id = %(id)s;
