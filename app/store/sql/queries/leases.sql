-- Leases: claim, start, heartbeat, finish, succeed, each fenced by the lease token;
-- and the sweeper's view of expired leases and possibly lost messages.
-- Named queries of app/store/leases.py. Each starts with "-- name: NAME"; app/store/sql
-- loads every file of this folder. Parameters are always bound (%(name)s), never
-- formatted into the text.

-- fragment: key_ahead
-- The jobs ahead of job k on its key (same tenant, kind and key), at most its
-- key_concurrency of them: the ones holding the key (claimed and not finished: a wait or
-- a retry keeps it) and the ones queued before it (parked or not), so a key's jobs start
-- in the order they were submitted.
(SELECT count(*) FROM (
    SELECT 1 FROM jobs x
    WHERE x.tenant = k.tenant AND x.kind = k.kind AND x.flow_key = k.flow_key
      AND x.id <> k.id
      AND x.state IN ('queued', 'leased', 'running', 'waiting', 'retrying', 'stalled')
      AND (x.state IN ('leased', 'running', 'retrying', 'stalled')
           OR (x.state = 'waiting' AND x.key_claimed_at IS NOT NULL)
           OR (x.state = 'queued' AND (x.created_at, x.id) < (k.created_at, k.id)))
    LIMIT k.key_concurrency) AS ahead)

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
-- A keyed job (migration 0030) over its key's limits is not claimed and uses no attempt:
-- key_over when its key_concurrency of the key's jobs are ahead of it (key_ahead), a
-- queued one then parked (released when one of them ends); rate_over when key_rate of
-- the key's jobs were claimed in the last key_rate_seconds (rate_wait: when the oldest
-- of those leaves the period), its message handed back until then.
-- The tenant's running cap (tenant_limits.max_running, else the default given): a job whose
-- tenant already holds that many live leases (counting the ones this batch would add,
-- in id order) is not claimed and uses no attempt: a queued one is parked (parked_now;
-- released when one of the tenant's leases ends), any other left as it is, and its row
-- comes back with deferred = true and the tenant's backlog; the caller hands the message
-- back (for a parked job, only as a backstop).
-- A claimed row says whether its tenant has parked jobs (has_parked): the worker
-- releases one when the lease ends (release_parked).
-- The caller runs this after lock_claim_tenants in one transaction, so claims of one
-- tenant take turns and each counts the leases the one before it committed: the caps
-- are exact under concurrent claims.
-- Its times are statement_timestamp(), not now(): now() is when the transaction began,
-- before it waited for its tenant's turn, so a claim held up there would count (for its
-- key's rate) and lease (for its lease's end) as older than it is.
WITH input AS (
    SELECT * FROM unnest(%(ids)s::uuid[], %(tokens)s::uuid[], %(generations)s::int[])
        AS t(id, token, generation)
), target AS (
    SELECT j.id, j.state AS from_state, j.tenant, j.kind, j.flow_key, j.key_concurrency,
           j.key_rate, j.key_rate_seconds, j.created_at,
           redrives_within(j.redriven_at, %(redrive_window)s) < %(redrive_budget)s AS budget_left,
           (j.state IN ('queued', 'retrying', 'stalled')
            OR (j.state = 'dead_lettered'
                AND redrives_within(j.redriven_at, %(redrive_window)s) < %(redrive_budget)s)
            OR (j.state = 'waiting' AND j.wake_at <= statement_timestamp())
            OR (j.state IN ('leased', 'running') AND j.lease_expires_at <= statement_timestamp()))
           AND NOT j.cancel_requested AS claimable
    FROM jobs j
    WHERE j.id IN (SELECT id FROM input)
    ORDER BY j.id
    FOR UPDATE OF j
), keyed AS (
    SELECT k.id,
           k.key_concurrency IS NOT NULL AND
           -- use: key_ahead
               >= k.key_concurrency AS key_over,
           k.key_rate IS NOT NULL AND
               (SELECT count(*) FROM jobs x
                WHERE x.tenant = k.tenant AND x.kind = k.kind AND x.flow_key = k.flow_key
                  AND x.key_rate IS NOT NULL AND x.id <> k.id
                  AND x.key_claimed_at > statement_timestamp() - make_interval(secs => k.key_rate_seconds))
               + row_number() OVER (PARTITION BY k.tenant, k.kind, k.flow_key
                                    ORDER BY k.created_at, k.id) - 1
               >= k.key_rate AS rate_over,
           extract(epoch FROM
               (SELECT min(x.key_claimed_at) FROM jobs x
                WHERE x.tenant = k.tenant AND x.kind = k.kind AND x.flow_key = k.flow_key
                  AND x.key_rate IS NOT NULL AND x.id <> k.id
                  AND x.key_claimed_at > statement_timestamp() - make_interval(secs => k.key_rate_seconds))
               + make_interval(secs => k.key_rate_seconds) - statement_timestamp())::float8 AS rate_wait
    FROM target k
    WHERE k.claimable AND k.flow_key IS NOT NULL
      AND (k.key_concurrency IS NOT NULL OR k.key_rate IS NOT NULL)
), tenants AS MATERIALIZED (
    -- Each tenant's cap and live leases, counted once for the batch, not once a job, and
    -- only up to the cap: at the cap, every job of the batch is over it.
    SELECT c.tenant, c.cap,
           (SELECT count(*) FROM (
                SELECT 1 FROM jobs r
                WHERE r.tenant = c.tenant AND r.state IN ('leased', 'running')
                  AND r.lease_expires_at > statement_timestamp()
                  AND r.id NOT IN (SELECT id FROM input)
                LIMIT c.cap) AS live) AS running
    FROM (SELECT t.tenant,
                 coalesce((SELECT l.max_running FROM tenant_limits l WHERE l.tenant = t.tenant),
                          %(max_running)s::int) AS cap
          FROM (SELECT DISTINCT tenant FROM target WHERE claimable) t) c
), capped AS (
    SELECT c.id, c.tenant, c.cap, c.running + c.rank > c.cap AS over
    FROM (
        SELECT t.id, t.tenant, n.cap, n.running,
               row_number() OVER (PARTITION BY t.tenant ORDER BY t.id) AS rank
        FROM target t
        JOIN tenants n ON n.tenant = t.tenant
        WHERE t.claimable
          AND NOT EXISTS (SELECT 1 FROM keyed k WHERE k.id = t.id AND (k.key_over OR k.rate_over))
    ) c
), held AS (
    -- Not claimed: over the tenant's running cap, or over its key's limits.
    SELECT t.id, coalesce(c.over, false) AS tenant_over, coalesce(k.key_over, false) AS key_over,
           coalesce(k.rate_over, false) AS rate_over, k.rate_wait, c.cap
    FROM target t
    LEFT JOIN capped c ON c.id = t.id
    LEFT JOIN keyed k ON k.id = t.id
    WHERE coalesce(c.over, false) OR coalesce(k.key_over, false) OR coalesce(k.rate_over, false)
), parking AS (
    -- A queued job over the tenant's cap or behind its key waits parked, with no message
    -- of its own to come back: the lease or the key's job that frees its slot releases it.
    -- By id (an array, so the plan reads the primary key whatever the statistics say:
    -- a plan made while the table was small scanned every queued job instead).
    UPDATE jobs j SET parked = true
    WHERE j.id = ANY(ARRAY(SELECT h.id FROM held h WHERE h.tenant_over OR h.key_over))
      AND (j.state = 'queued') IS TRUE AND NOT j.cancel_requested
    RETURNING j.id
), backlogs AS MATERIALIZED (
    -- The backlog of each tenant with a job held back, counted once, not once a job.
    SELECT d.tenant,
           (SELECT count(*) FROM jobs b
            WHERE b.tenant = d.tenant AND NOT b.parked
              AND b.state IN ('queued', 'retrying', 'stalled')) AS backlog
    FROM (SELECT DISTINCT t.tenant FROM target t JOIN held h ON h.id = t.id) d
), deferred AS (
    SELECT j.*, t.from_state, i.token AS token, false AS refused, true AS deferred,
           b.backlog,
           coalesce(h.cap, 1) AS cap,
           false AS has_parked,
           j.id IN (SELECT id FROM parking) AS parked_now,
           CASE WHEN h.rate_over AND NOT (h.tenant_over OR h.key_over) THEN 'rate'
                WHEN h.key_over THEN 'key' END AS held_by,
           CASE WHEN h.rate_over THEN h.rate_wait END AS key_wait
    FROM jobs j
    JOIN target t ON t.id = j.id
    JOIN input i ON i.id = j.id
    JOIN held h ON h.id = j.id
    JOIN backlogs b ON b.tenant = j.tenant
    WHERE j.id = ANY(%(ids)s::uuid[])
), claimed AS (
    UPDATE jobs j
    SET state = 'leased',
        attempt = CASE WHEN j.state = 'dead_lettered' THEN 1 ELSE j.attempt + 1 END,
        redrives = j.redrives + CASE WHEN j.state = 'dead_lettered' THEN 1 ELSE 0 END,
        throttles = CASE WHEN j.state = 'dead_lettered' THEN 0 ELSE j.throttles END,
        redriven_at = CASE WHEN j.state = 'dead_lettered'
                           THEN redriven_now(j.redriven_at, %(redrive_window)s)
                           ELSE j.redriven_at END,
        dead_lettered_by = NULL, parked = false,
        wait_kind = NULL, wait_key = NULL, wake_at = NULL, wait_rule = NULL, wake_sent_at = NULL,
        lease_owner = %(owner)s,
        lease_token = i.token,
        lease_expires_at = statement_timestamp() + make_interval(secs => %(lease_seconds)s),
        key_claimed_at = CASE WHEN j.flow_key IS NOT NULL THEN statement_timestamp() ELSE j.key_claimed_at END,
        updated_at = statement_timestamp()
    FROM target t, input i
    -- By id: the batch's ids on the primary key, the states tested with IS TRUE so that no
    -- index on state drives the plan (see parking).
    WHERE j.id = ANY(%(ids)s::uuid[]) AND j.id = t.id AND i.id = t.id
      AND NOT j.cancel_requested
      AND (j.state IN ('queued', 'retrying', 'stalled')
           OR (j.state = 'waiting' AND j.wake_at <= statement_timestamp())
           OR (j.state IN ('leased', 'running') AND j.lease_expires_at <= statement_timestamp())
           OR (j.state = 'dead_lettered' AND t.budget_left
               AND (i.generation = j.redrives OR j.dead_lettered_by = 'sweeper'))) IS TRUE
      AND NOT EXISTS (SELECT 1 FROM held h WHERE h.id = j.id)
    RETURNING j.*, t.from_state, i.token AS token, false AS refused, false AS deferred,
              0::bigint AS backlog, 0 AS cap,
              EXISTS (SELECT 1 FROM jobs p WHERE p.tenant = j.tenant AND p.parked
                      AND p.state = 'queued') AS has_parked,
              false AS parked_now, NULL::text AS held_by, NULL::float8 AS key_wait
), refused AS (
    UPDATE jobs j
    SET last_error = CASE WHEN starts_with(coalesce(j.last_error, ''), 'redrive budget used up')
                          THEN j.last_error
                          ELSE left(%(refusal)s || coalesce(' Last error: ' || j.last_error, ''),
                                    2000) END,
        updated_at = statement_timestamp()
    FROM target t, input i
    WHERE j.id = ANY(%(ids)s::uuid[]) AND j.id = t.id AND i.id = t.id
      AND NOT j.cancel_requested
      AND (j.state = 'dead_lettered') IS TRUE AND NOT t.budget_left
      AND (i.generation = j.redrives OR j.dead_lettered_by = 'sweeper')
    RETURNING j.*, t.from_state, i.token AS token, true AS refused, false AS deferred,
              0::bigint AS backlog, 0 AS cap, false AS has_parked, false AS parked_now,
              NULL::text AS held_by, NULL::float8 AS key_wait
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
SELECT * FROM claimed UNION ALL SELECT * FROM refused UNION ALL SELECT * FROM deferred;

-- name: lock_claim_tenants
-- Before claim_batch, in its transaction: the tenants of these jobs, each locked for the
-- transaction (in one order, so two claims never wait on each other in a circle), so
-- claims of one tenant take turns and its running cap and its keys' limits are exact.
SELECT count(pg_advisory_xact_lock(s.lock)) AS locked FROM (
    SELECT DISTINCT hashtextextended('tasklease.claim:' || tenant, 0) AS lock
    FROM jobs WHERE id = ANY(%(ids)s::uuid[])
    ORDER BY 1
) AS s;

-- name: start_batch
-- leased -> running for a batch, with each job's recorded effects, in one round trip.
-- The first start records the version of the kind's code it starts (kind_version, never
-- changed after); a job started before versions were recorded keeps NULL (not known).
WITH input AS (
    SELECT * FROM unnest(%(ids)s::uuid[], %(tokens)s::uuid[], %(versions)s::text[])
        AS t(id, token, version)
), started AS (
    UPDATE jobs j SET state = 'running', runs = j.runs + 1,
        started_at = coalesce(j.started_at, now()), updated_at = now(),
        kind_version = CASE WHEN j.runs = 0 THEN coalesce(j.kind_version, i.version)
                            ELSE j.kind_version END
    FROM input i
    WHERE j.id = i.id AND j.lease_token = i.token AND j.state = 'leased'
    RETURNING j.id, j.attempt, j.lease_owner, j.lease_token, j.kind_version
), ev AS (
    INSERT INTO job_events (job_id, from_state, to_state, attempt, worker)
    SELECT id, 'leased', 'running', attempt, lease_owner FROM started
)
SELECT s.lease_token AS token, s.kind_version,
       coalesce((SELECT jsonb_agg(jsonb_build_array(e.key, e.result, e.shape) ORDER BY e.seq)
                 FROM effects e WHERE e.job_id = s.id), '[]'::jsonb) AS effects
FROM started s;

-- name: heartbeat
UPDATE jobs SET lease_expires_at = now() + make_interval(secs => %(lease_seconds)s)
WHERE id = %(id)s AND lease_token = %(token)s AND state IN ('leased', 'running')
RETURNING cancel_requested;

-- name: finish
-- Fenced transition out of a live lease: succeeded, retrying, dead_lettered, queued
-- (lease handed back, attempt returned) or cancelled. has_parked: the job ended
-- (succeeded, dead_lettered, cancelled) and its tenant has parked jobs, one of which
-- the freed slot (the tenant's, or its key's) may release now, as succeed_batch says.
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
    RETURNING j.id, j.attempt, j.lease_owner, j.kind, j.created_at, j.tenant
), ev AS (
    INSERT INTO job_events (job_id, from_state, to_state, attempt, worker, detail)
    SELECT id, %(from_state)s::job_state, %(to_state)s::job_state, attempt, lease_owner, %(detail)s
    FROM done
)
-- What app/store/endings.py counts; cascade: a cancelled parent's trigger cancelled children.
SELECT id, kind, created_at, %(to_state)s::text AS to_state,
       %(to_state)s::text = 'cancelled' AND EXISTS (SELECT 1 FROM jobs c WHERE c.parent_id = done.id)
           AS cascade,
       %(to_state)s::text IN ('succeeded', 'dead_lettered', 'cancelled')
       AND EXISTS (SELECT 1 FROM jobs p WHERE p.tenant = done.tenant AND p.parked
                   AND p.state = 'queued') AS has_parked
FROM done;

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
    RETURNING j.id, j.attempt, j.lease_owner, i.token, j.tenant, j.kind, j.created_at
), ev AS (
    INSERT INTO job_events (job_id, from_state, to_state, attempt, worker)
    SELECT id, 'running', 'succeeded', attempt, lease_owner FROM done
)
-- has_parked: the tenant has parked jobs, one of which this freed lease may release
-- (the claim's flag misses jobs parked after the claim).
SELECT token, id, kind, created_at, 'succeeded' AS to_state,
       EXISTS (SELECT 1 FROM jobs p WHERE p.tenant = done.tenant AND p.parked
               AND p.state = 'queued') AS has_parked
FROM done;

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
      WHERE state IN ('queued', 'retrying', 'stalled') AND NOT cancel_requested AND NOT parked
        AND updated_at < now() - make_interval(secs => %(age)s)
      ORDER BY updated_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED) old
WHERE j.id = old.id
RETURNING j.id, j.tenant, j.priority;

-- name: release_parked
-- Parked jobs of these tenants go out, highest priority first, then oldest first, one
-- for each of the tenant's free slots (its running cap, less its jobs with a lease or
-- with a message that will take one): each is unparked and given an outbox row, in one
-- statement; the caller sends them (a send that fails, or a crash before it, is the
-- outbox relay's). Filling free slots only, never the window, a release sends nothing
-- that would only be deferred and parked again.
-- SKIP LOCKED: two releases at once take different jobs.
WITH t AS (
    SELECT DISTINCT unnest(%(tenants)s::text[]) AS tenant
), room AS (
    SELECT t.tenant,
           coalesce((SELECT l.max_running FROM tenant_limits l WHERE l.tenant = t.tenant),
                    %(max_running)s::int)
           - (SELECT count(*) FROM jobs j
              WHERE j.tenant = t.tenant AND NOT j.parked
                AND j.state IN ('queued', 'retrying', 'stalled', 'leased', 'running')) AS free
    FROM t
), pick AS (
    -- A keyed job goes only when fewer than its key_concurrency of its key's jobs are
    -- ahead of it (the claim's test, key_ahead): the slot one of them freed.
    SELECT p.id FROM room,
         LATERAL (SELECT k.id FROM jobs k
                  WHERE k.tenant = room.tenant AND k.parked AND k.state = 'queued'
                    AND (k.key_concurrency IS NULL OR
                         -- use: key_ahead
                         < k.key_concurrency)
                  ORDER BY (k.priority <> 'high'), (k.priority = 'low'), k.created_at, k.id
                  LIMIT greatest(room.free, 0)
                  FOR UPDATE SKIP LOCKED) p
), up AS (
    UPDATE jobs j SET parked = false, updated_at = now()
    -- By id, the state tested with IS TRUE (see claim_batch's parking).
    WHERE j.id = ANY(ARRAY(SELECT id FROM pick)) AND (j.parked AND j.state = 'queued') IS TRUE
    RETURNING j.id, j.trace_context, j.tenant, j.priority, j.flow_key
), box AS (
    INSERT INTO outbox (job_id) SELECT id FROM up RETURNING id, job_id
)
SELECT box.id, box.job_id, up.trace_context, up.tenant, up.priority, up.flow_key
FROM box JOIN up ON up.id = box.job_id;

-- name: parked_tenants
-- The tenants with parked jobs (the sweeper releases for them when no lease ending did).
SELECT DISTINCT tenant FROM jobs WHERE parked AND state = 'queued' LIMIT %(limit)s;
