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

-- name: audit_started_on
-- Unfinished jobs of a kind that started on one of its versions (the chaos gate's deploy
-- waits for one before it moves the workers to the next version).
SELECT count(*) AS n FROM jobs
WHERE kind = %(kind)s AND kind_version = %(version)s
  AND state IN ('leased', 'running', 'waiting', 'retrying', 'stalled');

-- name: audit_jobs
SELECT id::text AS id, kind, state::text AS state, attempt, max_attempts, payload, result,
       last_error, redrives, parent_id::text AS parent_id, spawn_key, wait_kind, wait_key,
       wake_at, wait_rule, kind_version
FROM jobs WHERE tenant <> 'chaos-history';

-- name: audit_events
SELECT job_id::text AS job_id, at, from_state::text AS from_state,
       to_state::text AS to_state, attempt, worker, detail
FROM job_events ORDER BY job_id, id;

-- name: audit_effects
SELECT job_id::text AS job_id, key, seq, shape, attempt, result, recorded_at,
       inherited_from::text AS inherited_from FROM effects;

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

-- name: audit_seed_history
-- The chaos run's history (issue 18): finished jobs of tenant chaos-history from 40 days
-- ago, each with two events, an effect and a sent outbox row, for the sweeper to prune
-- while the faults run.
WITH j AS (
    INSERT INTO jobs (id, tenant, kind, payload, state, attempt, max_attempts,
                      timeout_seconds, request_hash, created_at, updated_at, finished_at)
    SELECT gen_random_uuid(), 'chaos-history', 'demo.noop', jsonb_build_object(), 'succeeded', 1, 3, 60, 'h',
           now() - interval '40 days', now() - interval '40 days',
           now() - interval '40 days' + make_interval(secs => g)
    FROM generate_series(1, %(n)s) AS g
    RETURNING id
), e AS (
    INSERT INTO job_events (job_id, from_state, to_state, attempt)
    SELECT id, s.f, s.t, 1 FROM j,
           (VALUES (NULL::job_state, 'queued'::job_state), ('running', 'succeeded')) AS s(f, t)
), f AS (
    INSERT INTO effects (job_id, key, seq, result, attempt) SELECT id, 'step', 0, '1', 1 FROM j
), o AS (
    INSERT INTO outbox (job_id, sent_at) SELECT id, now() FROM j
)
SELECT count(*) AS n FROM j;

-- name: audit_history
-- The history left, and its jobs that lost some rows but not all (a prune is one
-- statement: there must be none).
SELECT count(*) AS left,
       count(*) FILTER (WHERE
           (SELECT count(*) FROM job_events e WHERE e.job_id = j.id) <> 2
           OR (SELECT count(*) FROM effects f WHERE f.job_id = j.id) <> 1
           OR (SELECT count(*) FROM outbox o WHERE o.job_id = j.id) <> 1) AS partial
FROM jobs j WHERE j.tenant = 'chaos-history';

-- name: audit_counts_mismatch
-- The (tenant, kind, state) whose maintained count (migration 0018) is not the table's.
WITH kept AS (
    SELECT tenant, kind, state, sum(n) AS n FROM (
        SELECT tenant, kind, state, n FROM job_counts
        UNION ALL SELECT tenant, kind, state, n FROM job_count_deltas) AS parts
    GROUP BY tenant, kind, state HAVING sum(n) <> 0
), scan AS (
    SELECT tenant, kind, state, count(*) AS n FROM jobs GROUP BY tenant, kind, state
)
SELECT coalesce(k.tenant, s.tenant) AS tenant, coalesce(k.kind, s.kind) AS kind,
       coalesce(k.state, s.state)::text AS state, k.n AS kept, s.n AS scanned
FROM kept k FULL JOIN scan s USING (tenant, kind, state)
WHERE k.n IS DISTINCT FROM s.n;
