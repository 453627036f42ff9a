-- Deadlines of whole runs (migration 0022): ending the jobs past theirs.
-- Named queries of app/store/deadlines.py. Each starts with "-- name: NAME"; app/store/sql
-- loads every file of this folder. Parameters are always bound (%(name)s), never
-- formatted into the text.

-- name: expire_unheld
-- The sweeper's pass: unfinished jobs past their deadline that no live lease holds
-- (queued, parked, retrying, stalled, waiting on anything, or leased with the lease run
-- out), in a batch, skipping rows another transaction holds. Each ends dead-lettered,
-- "deadline passed"; cancel_requested set with it makes the trigger jobs_cancel_children
-- cancel its children in this statement. A job under a live lease is its worker's.
WITH target AS (
    SELECT id, state AS from_state, lease_owner FROM jobs
    WHERE deadline <= now()
      AND state IN ('queued', 'leased', 'running', 'retrying', 'stalled', 'waiting')
      AND NOT (state IN ('leased', 'running') AND lease_expires_at > now())
    ORDER BY deadline LIMIT %(limit)s FOR UPDATE SKIP LOCKED
), done AS (
    UPDATE jobs j
    SET state = 'dead_lettered', dead_lettered_by = 'deadline', cancel_requested = true,
        last_error = %(reason)s, finished_at = now(), updated_at = now(), parked = false,
        lease_token = NULL, lease_expires_at = NULL,
        wait_kind = NULL, wait_key = NULL, wake_at = NULL, wait_rule = NULL, wake_sent_at = NULL
    FROM target t
    WHERE j.id = t.id
    RETURNING j.id, t.from_state, j.attempt, t.lease_owner, j.kind, j.created_at, j.parent_id
), ev AS (
    INSERT INTO job_events (job_id, from_state, to_state, attempt, worker, detail)
    SELECT id, from_state, 'dead_lettered', attempt, lease_owner,
           %(reason)s || ' (ended by the sweeper)' FROM done
)
-- What app/store/endings.py counts; cascade: the trigger cancelled its children.
SELECT id, kind, created_at, parent_id, 'dead_lettered' AS to_state,
       EXISTS (SELECT 1 FROM jobs c WHERE c.parent_id = done.id) AS cascade
FROM done;

-- name: expire_held
-- A worker's end of a job past its deadline, fenced by its lease token: at the claim (a
-- delivery past the deadline) or while it runs (the attempt stopped as a cancel stops
-- it). The same end as expire_unheld's.
WITH done AS (
    UPDATE jobs j
    SET state = 'dead_lettered', dead_lettered_by = 'deadline', cancel_requested = true,
        last_error = %(reason)s, finished_at = now(), updated_at = now(),
        lease_token = NULL, lease_expires_at = NULL
    WHERE j.id = %(id)s AND j.lease_token = %(token)s AND j.state IN ('leased', 'running')
      AND j.deadline IS NOT NULL
    RETURNING j.id, j.attempt, j.lease_owner, j.kind, j.created_at, j.tenant
), ev AS (
    INSERT INTO job_events (job_id, from_state, to_state, attempt, worker, detail)
    SELECT id, %(from_state)s::job_state, 'dead_lettered', attempt, lease_owner,
           %(reason)s || ' (ended by its worker)' FROM done
)
-- has_parked: as leases.sql finish's (the worker releases one as the lease ends).
SELECT id, kind, created_at, 'dead_lettered' AS to_state,
       EXISTS (SELECT 1 FROM jobs c WHERE c.parent_id = done.id) AS cascade,
       EXISTS (SELECT 1 FROM jobs p WHERE p.tenant = done.tenant AND p.parked
               AND p.state = 'queued') AS has_parked
FROM done;

-- name: past_deadline
-- Jobs past their deadline still unfinished (the invariant after a drain: none).
SELECT id, state::text AS state, deadline FROM jobs
WHERE deadline <= now() - make_interval(secs => %(grace)s)
  AND state IN ('queued', 'leased', 'running', 'retrying', 'stalled', 'waiting')
ORDER BY deadline LIMIT %(limit)s;
