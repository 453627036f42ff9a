-- Retention (docs/explain/design.md#retention): terminal jobs past their state's retention are deleted
-- with their rows in every other table, a batch at a time.
-- Named queries of app/store/retention.py. Each starts with "-- name: NAME"; app/store/sql
-- loads every file of this folder. Parameters are always bound (%(name)s), never
-- formatted into the text.

-- name: prune_jobs
-- One batch of one state, in one statement: the state's oldest finished jobs (the
-- jobs_finished index, in order, LIMIT: bounded time and locks, no table rewrite), less
-- those still held: a job whose Idempotency-Key is within its replay window, a child
-- whose parent is unfinished or dead-lettered (its gather counts it; a redrive replays
-- its spawns), a parent with an unfinished child.
-- A row another transaction holds (a redrive, a cancel) is skipped, not waited for. The
-- rows of the other tables go in the same statement (the cascade would find none left),
-- each counted.
WITH one_at_a_time AS (
    SELECT pg_try_advisory_xact_lock(hashtext('tasklease_prune')) AS got
), doomed AS (
    SELECT j.id FROM jobs j
    WHERE j.state = %(state)s::job_state
      AND j.finished_at < now() - make_interval(secs => %(keep)s)
      AND (j.idempotency_key IS NULL
           OR j.created_at < now() - make_interval(secs => %(replay_window)s))
      -- Scalar subqueries, never turned into joins: one index probe per candidate (as
      -- NOT EXISTS, the planner hashed every unfinished job, or read every child).
      AND NOT coalesce((SELECT true FROM jobs c
                        WHERE c.parent_id = j.id
                          AND c.state IN ('queued', 'leased', 'running', 'retrying',
                                          'stalled', 'waiting')
                        LIMIT 1), false)
      AND (j.parent_id IS NULL
           OR coalesce((SELECT p.state IN ('succeeded', 'cancelled')
                        FROM jobs p WHERE p.id = j.parent_id), true))
      -- A cancelled dead letter's message may still be in the DLQ: kept as long.
      AND (j.dead_lettered_by IS NULL
           OR j.finished_at < now() - make_interval(secs => %(dlq_keep)s))
      -- One prune at a time (sweepers, the CLI): a parent's delete sets its children's
      -- parent_id, which two prunes could lock in opposite orders.
      AND (SELECT got FROM one_at_a_time)
    ORDER BY j.finished_at
    LIMIT %(limit)s
    FOR UPDATE OF j SKIP LOCKED
), ids AS (
    -- An array, so every delete below probes its table's job_id index for each id
    -- (a join against the CTE let the planner hash a whole table instead).
    SELECT coalesce(array_agg(id), ARRAY[]::uuid[]) AS a FROM doomed
), events AS (
    DELETE FROM job_events WHERE job_id = ANY((SELECT a FROM ids)::uuid[]) RETURNING 1
), output AS (
    DELETE FROM job_output WHERE job_id = ANY((SELECT a FROM ids)::uuid[]) RETURNING 1
), effects AS (
    DELETE FROM effects WHERE job_id = ANY((SELECT a FROM ids)::uuid[]) RETURNING 1
), box AS (
    DELETE FROM outbox WHERE job_id = ANY((SELECT a FROM ids)::uuid[]) RETURNING 1
), calls AS (
    DELETE FROM callbacks WHERE job_id = ANY((SELECT a FROM ids)::uuid[]) RETURNING 1
), msgs AS (
    DELETE FROM job_messages WHERE job_id = ANY((SELECT a FROM ids)::uuid[]) RETURNING 1
), states AS (
    DELETE FROM published_state WHERE job_id = ANY((SELECT a FROM ids)::uuid[]) RETURNING 1
), gone AS (
    DELETE FROM jobs WHERE id = ANY((SELECT a FROM ids)::uuid[]) RETURNING 1
)
SELECT (SELECT count(*) FROM gone) AS jobs,
       (SELECT count(*) FROM events) AS job_events,
       (SELECT count(*) FROM output) AS job_output,
       (SELECT count(*) FROM effects) AS effects,
       (SELECT count(*) FROM box) AS outbox,
       (SELECT count(*) FROM calls) AS callbacks,
       (SELECT count(*) FROM msgs) AS job_messages,
       (SELECT count(*) FROM states) AS published_state;

-- name: prunable
-- What a prune would delete now (`tasklease prune --dry-run`), by state: the jobs past
-- their retention, and of those the ones held back (replay window, unfinished family),
-- with the oldest finish. A count over the jobs past retention: an operator's question,
-- not the sweeper's.
SELECT p.state::text AS state, count(j.id) AS due,
       count(j.id) FILTER (WHERE
           (j.idempotency_key IS NOT NULL
            AND j.created_at >= now() - make_interval(secs => %(replay_window)s))
           OR EXISTS (SELECT 1 FROM jobs c WHERE c.parent_id = j.id
                      AND c.state IN ('queued', 'leased', 'running', 'retrying', 'stalled',
                                      'waiting'))
           OR NOT coalesce((SELECT par.state IN ('succeeded', 'cancelled')
                            FROM jobs par WHERE par.id = j.parent_id), true)
           OR (j.dead_lettered_by IS NOT NULL
               AND j.finished_at >= now() - make_interval(secs => %(dlq_keep)s))
       ) AS held,
       min(j.finished_at) AS oldest
FROM unnest(%(states)s::job_state[], %(keeps)s::float8[]) AS p(state, keep)
LEFT JOIN jobs j ON j.state = p.state
                AND j.finished_at < now() - make_interval(secs => p.keep)
GROUP BY p.state
ORDER BY p.state;
