-- Jobs' ends: what a cancel's trigger ended below the jobs it cancelled.
-- Named queries of app/store/endings.py. Each starts with "-- name: NAME"; app/store/sql
-- loads every file of this folder. Parameters are always bound (%(name)s), never
-- formatted into the text.

-- name: cancelled_below
-- The descendants of the given jobs that the cancelling trigger (jobs_cancel_children,
-- migration 0007) cancelled in this transaction: it asks each one to stop and cancels at
-- once those no live lease holds, finished at now(), this transaction's time. A
-- descendant asked to stop earlier and finished before now() is not this transaction's.
WITH RECURSIVE below AS (
    SELECT c.id, c.kind, c.created_at, c.state, c.finished_at FROM jobs c
    WHERE c.parent_id = ANY(%(ids)s::uuid[]) AND c.cancel_requested
    UNION ALL
    SELECT c.id, c.kind, c.created_at, c.state, c.finished_at FROM jobs c
    JOIN below b ON c.parent_id = b.id
    WHERE c.cancel_requested
)
SELECT id, kind, created_at, 'cancelled' AS to_state FROM below
WHERE state = 'cancelled' AND finished_at = now();
