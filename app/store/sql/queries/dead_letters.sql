-- Dead letters: listing, redrive, and reconciling what the redrive policy moved.
-- Named queries of app/store/dead_letters.py. Each starts with "-- name: NAME"; app/store/sql
-- loads every file of this folder. Parameters are always bound (%(name)s), never
-- formatted into the text.

-- name: dead_letters
SELECT * FROM jobs
WHERE state = 'dead_lettered'
  AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)
  AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
  AND (%(ids)s::uuid[] IS NULL OR id = ANY(%(ids)s::uuid[]))
ORDER BY finished_at, id
LIMIT %(limit)s;

-- name: redrive_reset
-- Back to queued with a fresh attempt budget; a new generation refuses stale dead letters.
-- A cancel asked for while the job ran, before it failed, is superseded: a redrive is the
-- newer request, and the job would otherwise be cancelled unrun at its next delivery.
-- A job whose redrive budget is used up is left dead-lettered and answered refused,
-- unless forced (an operator's deliberate redrive; it counts in the window all the same).
WITH target AS (
    SELECT id, redrives_within(redriven_at, %(redrive_window)s) < %(redrive_budget)s AS budget_left
    FROM jobs
    WHERE id = ANY(%(ids)s) AND state = 'dead_lettered'
    ORDER BY id
    FOR UPDATE
), r AS (
    UPDATE jobs j
    SET state = 'queued', attempt = 0, throttles = 0, redrives = j.redrives + 1,
        dead_lettered_by = NULL,
        -- Ended by its deadline: the operator's redrive gives it a run without one.
        deadline = CASE WHEN j.dead_lettered_by = 'deadline' THEN NULL ELSE j.deadline END,
        redriven_at = redriven_now(j.redriven_at, %(redrive_window)s),
        cancel_requested = false,
        finished_at = NULL, lease_token = NULL, lease_expires_at = NULL, updated_at = now()
    FROM target t
    WHERE j.id = t.id AND (t.budget_left OR %(force)s)
    RETURNING j.id
), ev AS (
    INSERT INTO job_events (job_id, from_state, to_state, attempt, detail)
    SELECT id, 'dead_lettered', 'queued', 0, %(detail)s FROM r
), box AS (
    INSERT INTO outbox (job_id) SELECT id FROM r WHERE %(with_outbox)s RETURNING id, job_id
)
SELECT r.id, box.id AS outbox_id, false AS refused FROM r LEFT JOIN box ON box.job_id = r.id
UNION ALL
SELECT t.id, NULL, true FROM target t WHERE NOT (t.budget_left OR %(force)s);

-- name: reconcile_moved
-- Jobs whose message SQS moved to the DLQ by its redrive policy: the last backstop fired.
WITH moved AS (
    UPDATE jobs j
    SET state = 'dead_lettered', dead_lettered_by = 'sweeper', finished_at = now(), updated_at = now(),
        lease_token = NULL, lease_expires_at = NULL,
        last_error = 'worker never finished: the queue''s redrive policy moved the message to the DLQ'
    FROM (SELECT id, state FROM jobs WHERE id = ANY(%(ids)s) FOR UPDATE) t
    WHERE j.id = t.id
      AND (j.state IN ('queued', 'retrying', 'stalled')
           OR (j.state IN ('leased', 'running') AND j.lease_expires_at <= now()))
    RETURNING j.id, t.state AS from_state, j.attempt, j.lease_owner, j.kind, j.created_at
), ev AS (
    INSERT INTO job_events (job_id, from_state, to_state, attempt, worker, detail)
    SELECT id, from_state, 'dead_lettered', attempt, lease_owner,
           'worker never finished: moved to the DLQ by the redrive policy' FROM moved
)
SELECT id, kind, created_at, 'dead_lettered' AS to_state FROM moved;
