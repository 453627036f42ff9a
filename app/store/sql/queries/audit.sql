-- Read-only views of the whole store for the local stack and the chaos harness
-- (app/store/audit.py). Ids and enums as text: the checker needs no store types.

-- name: audit_counts_by_state
SELECT state::text AS state, count(*) AS n FROM jobs GROUP BY state;

-- name: audit_count_in_states
SELECT count(*) AS n FROM jobs
WHERE id = ANY(%(ids)s::uuid[]) AND state::text = ANY(%(states)s);

-- name: audit_dead_letter_errors
SELECT last_error FROM jobs WHERE state = 'dead_lettered';

-- name: audit_transient_dead_letters
SELECT id FROM jobs
WHERE state = 'dead_lettered' AND coalesce(last_error, '') NOT LIKE 'permanent:%%';

-- name: audit_count_unfinished
SELECT count(*) AS n FROM jobs WHERE state::text <> ALL(%(states)s);

-- name: audit_jobs
SELECT id::text AS id, kind, state::text AS state, attempt, max_attempts, payload, result,
       last_error, redrives, parent_id::text AS parent_id, spawn_key, wait_kind, wait_key,
       wake_at, wait_rule
FROM jobs;

-- name: audit_events
SELECT job_id::text AS job_id, at, from_state::text AS from_state,
       to_state::text AS to_state, attempt, worker, detail
FROM job_events ORDER BY job_id, id;

-- name: audit_effects
SELECT job_id::text AS job_id, key, attempt, result, recorded_at FROM effects;

-- name: audit_chunks
-- Streamed answers' chunks (ctx.generate): the checker joins them into each answer's text.
SELECT job_id::text AS job_id, key, seq, data->>'text' AS text
FROM job_output WHERE type = 'chunk' ORDER BY job_id, key, seq;

-- name: audit_callbacks
SELECT job_id::text AS job_id, key, state, result, error, deadline, answered_at FROM callbacks;

-- name: audit_now
SELECT now() AS now;

-- name: audit_duplicated_effects
SELECT job_id, key FROM effects GROUP BY job_id, key HAVING count(*) > 1;

-- name: audit_waiting_on_carrier
-- Jobs that need a message on the carrier (the chaos run's view after a carrier restart):
-- the ones waiting for a worker, and the ones a worker holds (a lease holds its message).
SELECT id::text AS id FROM jobs
WHERE state IN ('queued', 'retrying', 'stalled', 'leased', 'running')
  AND NOT parked AND NOT cancel_requested;
