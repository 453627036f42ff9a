-- Leases: claim, start, heartbeat, finish, succeed, each fenced by the lease token;
-- and the sweeper's view of expired leases and possibly lost messages.
-- Named queries of app/store/leases.py. Each starts with "-- name: NAME"; app/store/sql
-- loads every file of this folder. Parameters are always bound (%(name)s), never
-- formatted into the text.

-- name: claim_batch
-- One statement for a batch of deliveries: claim each job with a fresh fencing token,
-- count the attempt, write the event. Rows are locked in id order, so two batches that
-- share jobs cannot deadlock. Claimable: queued, retrying, stalled; waiting with its timer
-- (or its callback's deadline) due; leased/running with
-- an expired lease; a dead_lettered job when this delivery is a redrive (then the
-- attempt budget restarts) and the job's redrive budget is not used up. A redrive past
-- the budget is refused: the job stays dead_lettered, last_error and an event say why,
-- and the row comes back with refused = true (the caller deletes the message unrun).
-- Two deliveries of one job in a batch: one claim wins, the other finds the winner's
-- live lease (a duplicate). The caller matches rows by token.
WITH input AS (
    SELECT * FROM unnest(%(ids)s::uuid[], %(tokens)s::uuid[], %(generations)s::int[])
        AS t(id, token, generation)
), target AS (
    SELECT j.id, j.state AS from_state,
           redrives_within(j.redriven_at, %(redrive_window)s) < %(redrive_budget)s AS budget_left
    FROM jobs j
    WHERE j.id IN (SELECT id FROM input)
    ORDER BY j.id
    FOR UPDATE OF j
), claimed AS (
    UPDATE jobs j
    SET state = 'leased',
        attempt = CASE WHEN j.state = 'dead_lettered' THEN 1 ELSE j.attempt + 1 END,
        redrives = j.redrives + CASE WHEN j.state = 'dead_lettered' THEN 1 ELSE 0 END,
        redriven_at = CASE WHEN j.state = 'dead_lettered'
                           THEN redriven_now(j.redriven_at, %(redrive_window)s)
                           ELSE j.redriven_at END,
        dead_lettered_by = NULL,
        wait_kind = NULL, wait_key = NULL, wake_at = NULL, wait_rule = NULL, wake_sent_at = NULL,
        lease_owner = %(owner)s,
        lease_token = i.token,
        lease_expires_at = now() + make_interval(secs => %(lease_seconds)s),
        updated_at = now()
    FROM target t, input i
    WHERE j.id = t.id AND i.id = t.id
      AND NOT j.cancel_requested
      AND (j.state IN ('queued', 'retrying', 'stalled')
           OR (j.state = 'waiting' AND j.wake_at <= now())
           OR (j.state IN ('leased', 'running') AND j.lease_expires_at <= now())
           OR (j.state = 'dead_lettered' AND t.budget_left
               AND (i.generation = j.redrives OR j.dead_lettered_by = 'sweeper')))
    RETURNING j.*, t.from_state, i.token AS token, false AS refused
), refused AS (
    UPDATE jobs j
    SET last_error = CASE WHEN starts_with(coalesce(j.last_error, ''), 'redrive budget used up')
                          THEN j.last_error
                          ELSE left(%(refusal)s || coalesce(' Last error: ' || j.last_error, ''),
                                    2000) END,
        updated_at = now()
    FROM target t, input i
    WHERE j.id = t.id AND i.id = t.id
      AND NOT j.cancel_requested
      AND j.state = 'dead_lettered' AND NOT t.budget_left
      AND (i.generation = j.redrives OR j.dead_lettered_by = 'sweeper')
    RETURNING j.*, t.from_state, i.token AS token, true AS refused
), ev AS (
    INSERT INTO job_events (job_id, from_state, to_state, attempt, worker, detail)
    SELECT id, from_state, 'leased'::job_state, attempt, lease_owner,
           CASE WHEN from_state = 'dead_lettered' THEN 'redriven'
                WHEN from_state = 'waiting' THEN 'woken: due' END
    FROM claimed
    UNION ALL
    SELECT id, 'dead_lettered'::job_state, 'dead_lettered'::job_state, attempt, %(owner)s,
           'redrive refused, message deleted unrun: ' || %(refusal)s
    FROM refused
)
SELECT * FROM claimed UNION ALL SELECT * FROM refused;

-- name: start_batch
-- leased -> running for a batch, with each job's recorded effects, in one round trip.
WITH input AS (
    SELECT * FROM unnest(%(ids)s::uuid[], %(tokens)s::uuid[]) AS t(id, token)
), started AS (
    UPDATE jobs j SET state = 'running', runs = j.runs + 1,
        started_at = coalesce(j.started_at, now()), updated_at = now()
    FROM input i
    WHERE j.id = i.id AND j.lease_token = i.token AND j.state = 'leased'
    RETURNING j.id, j.attempt, j.lease_owner, j.lease_token
), ev AS (
    INSERT INTO job_events (job_id, from_state, to_state, attempt, worker)
    SELECT id, 'leased', 'running', attempt, lease_owner FROM started
)
SELECT s.lease_token AS token,
       coalesce((SELECT jsonb_agg(jsonb_build_array(e.key, e.result) ORDER BY e.seq)
                 FROM effects e WHERE e.job_id = s.id), '[]'::jsonb) AS effects
FROM started s;

-- name: heartbeat
UPDATE jobs SET lease_expires_at = now() + make_interval(secs => %(lease_seconds)s)
WHERE id = %(id)s AND lease_token = %(token)s AND state IN ('leased', 'running')
RETURNING cancel_requested;

-- name: finish
-- Fenced transition out of a live lease: succeeded, retrying, dead_lettered, queued
-- (lease handed back, attempt returned) or cancelled.
WITH done AS (
    UPDATE jobs j
    SET state = %(to_state)s::job_state,
        result = coalesce(%(result)s, j.result),
        last_error = coalesce(%(error)s, j.last_error),
        attempt = j.attempt - %(refund)s,
        dead_lettered_by = %(dead_lettered_by)s,
        lease_expires_at = CASE WHEN %(to_state)s::job_state = 'retrying'
                                THEN now() + make_interval(secs => %(delay)s) END,
        lease_token = NULL,
        finished_at = CASE WHEN %(to_state)s::job_state IN ('succeeded', 'dead_lettered', 'cancelled')
                           THEN now() END,
        updated_at = now()
    WHERE j.id = %(id)s AND j.lease_token = %(token)s AND j.state IN ('leased', 'running')
    RETURNING j.id, j.attempt, j.lease_owner
), ev AS (
    INSERT INTO job_events (job_id, from_state, to_state, attempt, worker, detail)
    SELECT id, %(from_state)s::job_state, %(to_state)s::job_state, attempt, lease_owner, %(detail)s
    FROM done
)
SELECT count(*) AS changed FROM done;

-- name: succeed_batch
-- Fenced completions of a batch of jobs, one round trip: running -> succeeded.
WITH input AS (
    SELECT * FROM unnest(%(ids)s::uuid[], %(tokens)s::uuid[], %(results)s::jsonb[])
        AS t(id, token, result)
), done AS (
    UPDATE jobs j
    SET state = 'succeeded',
        result = coalesce(i.result, j.result),
        dead_lettered_by = NULL,
        lease_expires_at = NULL,
        lease_token = NULL,
        finished_at = now(),
        updated_at = now()
    FROM input i
    WHERE j.id = i.id AND j.lease_token = i.token AND j.state IN ('leased', 'running')
    RETURNING j.id, j.attempt, j.lease_owner, i.token
), ev AS (
    INSERT INTO job_events (job_id, from_state, to_state, attempt, worker)
    SELECT id, 'running', 'succeeded', attempt, lease_owner FROM done
)
SELECT token FROM done;

-- name: mark_stalled
-- Leases that expired with no heartbeat: the holder is presumed dead.
WITH stalled AS (
    UPDATE jobs j SET state = 'stalled', updated_at = now()
    FROM (SELECT id, state FROM jobs
          WHERE state IN ('leased', 'running') AND lease_expires_at < now() - make_interval(secs => %(grace)s)
          ORDER BY lease_expires_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED) old
    WHERE j.id = old.id
    RETURNING j.id, old.state AS from_state, j.attempt, j.lease_owner
), ev AS (
    INSERT INTO job_events (job_id, from_state, to_state, attempt, worker, detail)
    SELECT id, from_state, 'stalled', attempt, lease_owner, 'lease expired with no heartbeat from ' || coalesce(lease_owner, '?')
    FROM stalled
)
SELECT id FROM stalled;

-- name: touch_lost
-- Waiting jobs that saw no change for a long time: their message may be gone.
UPDATE jobs j SET updated_at = now()
FROM (SELECT id FROM jobs
      WHERE state IN ('queued', 'retrying', 'stalled') AND NOT cancel_requested
        AND updated_at < now() - make_interval(secs => %(age)s)
      ORDER BY updated_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED) old
WHERE j.id = old.id
RETURNING j.id, j.tenant, j.priority;
