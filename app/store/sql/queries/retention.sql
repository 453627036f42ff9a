-- Retention (README "Retention"): terminal jobs past their state's retention are deleted
-- with their rows in every other table, a batch at a time.
-- Named queries of app/store/retention.py. Each starts with "-- name: NAME"; app/store/sql
-- loads every file of this folder. Parameters are always bound (%(name)s), never
-- formatted into the text.

-- name: prune_jobs
-- One batch of one state, in one statement: the state's oldest finished jobs (the
-- jobs_finished index, in order, LIMIT: bounded time and locks, no table rewrite), less
-- those still held: a job whose Idempotency-Key is within its replay window, a child
-- whose parent is unfinished (its gather counts it), a parent with an unfinished child.
-- A row another transaction holds (a redrive, a cancel) is skipped, not waited for. The
-- rows of the other tables go in the same statement (the cascade would find none left),
-- each counted.
WITH doomed AS (
    SELECT j.id FROM jobs j
    WHERE j.state = %(state)s::job_state
      AND j.finished_at < now() - make_interval(secs => %(keep)s)
      AND (j.idempotency_key IS NULL
           OR j.created_at < now() - make_interval(secs => %(replay_window)s))
      AND NOT EXISTS (
          SELECT 1 FROM jobs c
          WHERE c.parent_id = j.id
            AND c.state NOT IN ('succeeded', 'dead_lettered', 'cancelled'))
      AND NOT EXISTS (
          SELECT 1 FROM jobs p
          WHERE p.id = j.parent_id
            AND p.state NOT IN ('succeeded', 'dead_lettered', 'cancelled'))
    ORDER BY j.finished_at
    LIMIT %(limit)s
    FOR UPDATE OF j SKIP LOCKED
), events AS (
    DELETE FROM job_events e USING doomed d WHERE e.job_id = d.id RETURNING 1
), output AS (
    DELETE FROM job_output o USING doomed d WHERE o.job_id = d.id RETURNING 1
), effects AS (
    DELETE FROM effects f USING doomed d WHERE f.job_id = d.id RETURNING 1
), box AS (
    DELETE FROM outbox b USING doomed d WHERE b.job_id = d.id RETURNING 1
), calls AS (
    DELETE FROM callbacks c USING doomed d WHERE c.job_id = d.id RETURNING 1
), gone AS (
    DELETE FROM jobs j USING doomed d WHERE j.id = d.id RETURNING 1
)
SELECT (SELECT count(*) FROM gone) AS jobs,
       (SELECT count(*) FROM events) AS job_events,
       (SELECT count(*) FROM output) AS job_output,
       (SELECT count(*) FROM effects) AS effects,
       (SELECT count(*) FROM box) AS outbox,
       (SELECT count(*) FROM calls) AS callbacks;

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
                      AND c.state NOT IN ('succeeded', 'dead_lettered', 'cancelled'))
           OR EXISTS (SELECT 1 FROM jobs par WHERE par.id = j.parent_id
                      AND par.state NOT IN ('succeeded', 'dead_lettered', 'cancelled'))
       ) AS held,
       min(j.finished_at) AS oldest
FROM unnest(%(states)s::job_state[], %(keeps)s::float8[]) AS p(state, keep)
LEFT JOIN jobs j ON j.state = p.state
                AND j.finished_at < now() - make_interval(secs => p.keep)
GROUP BY p.state
ORDER BY p.state;
