-- Named queries. Each starts with "-- name: NAME"; app/store/sql/__init__.py loads them.
-- Parameters are always bound (%(name)s), never formatted into the text.

-- name: insert_jobs
-- Admission, the job rows and their outbox rows in one statement, so they commit
-- together: one job (POST /v1/jobs) or a batch (POST /v1/jobs/batch), all or nothing.
-- Admission: the tenant's jobs created in the last burst / rate seconds plus the new
-- ones are at most `burst` (a sliding window over rows every API process writes anyway:
-- no counter to lock, so concurrent submissions never queue on one row), and its
-- unfinished jobs plus the new ones are at most its cap. An item whose Idempotency-Key
-- the tenant already used is a replay: it asks for nothing new and is answered with the
-- job that key made (over a limit too); a replay whose request differs refuses the
-- whole statement (the caller answers 409). Refused: nothing is written, and the
-- verdict columns say why. `key_id`, when set, is the caller's API key, verified from
-- the process's memory: the statement reads its row and writes nothing for a revoked
-- key (key_ok false; the caller answers 401), which spares the request a round trip.
WITH caller AS (
    SELECT %(key_id)s::text IS NULL
           OR EXISTS (SELECT 1 FROM api_keys k
                      WHERE k.id = %(key_id)s::text AND k.revoked_at IS NULL) AS key_ok
), lim AS (
    SELECT coalesce(t.rate_per_second, %(rate)s::float8) AS rate,
           coalesce(t.burst, %(burst)s::int) AS burst,
           coalesce(t.max_in_flight, %(max_in_flight)s::int) AS max_in_flight
    FROM (SELECT 1) AS one LEFT JOIN tenant_limits t ON t.tenant = %(tenant)s
), input AS (
    SELECT * FROM unnest(%(ids)s::uuid[], %(kinds)s::text[], %(payloads)s::jsonb[],
                         %(max_attempts)s::int[], %(timeouts)s::int[],
                         %(idempotency_keys)s::text[], %(request_hashes)s::text[])
        WITH ORDINALITY AS t(id, kind, payload, max_attempts, timeout_seconds,
                             idempotency_key, request_hash, ord)
), replay AS (
    SELECT i.ord, j.request_hash = i.request_hash AS same FROM input i
    JOIN jobs j ON j.tenant = %(tenant)s AND j.idempotency_key = i.idempotency_key
), fresh AS (
    SELECT * FROM input WHERE ord NOT IN (SELECT ord FROM replay)
), recent AS (
    -- The tenant's newest `burst` jobs inside the window (an index range scan).
    SELECT j.created_at FROM jobs j
    WHERE j.tenant = %(tenant)s
      AND j.created_at > now() - make_interval(secs => (SELECT burst / rate FROM lim))
    ORDER BY j.created_at DESC
    LIMIT (SELECT burst FROM lim)
), flight AS (
    -- Counted up to the cap only: the cost stays bounded however many jobs wait.
    SELECT count(*) AS n FROM (
        SELECT 1 FROM jobs
        WHERE tenant = %(tenant)s AND state IN ('queued', 'leased', 'running', 'retrying', 'stalled')
        LIMIT (SELECT max_in_flight FROM lim)
    ) AS unfinished
), counts AS (
    SELECT (SELECT count(*) FROM fresh) AS wanted, (SELECT count(*) FROM recent) AS recent
), verdict AS (
    SELECT counts.recent + counts.wanted <= lim.burst AS rate_ok,
           -- When enough of the oldest in the window have left it for the new jobs to fit.
           extract(epoch FROM (SELECT created_at FROM recent ORDER BY created_at
                               OFFSET greatest(0, counts.recent + counts.wanted - lim.burst - 1)
                               LIMIT 1)
                              + make_interval(secs => lim.burst / lim.rate) - now()) AS wait_seconds,
           lim.rate AS rate, lim.burst AS burst, counts.wanted AS wanted,
           flight.n + counts.wanted <= lim.max_in_flight AS flight_ok,
           lim.max_in_flight AS max_in_flight,
           (SELECT min(ord) FROM replay WHERE NOT same) AS conflict_ord,
           caller.key_ok AS key_ok
    FROM lim, flight, counts, caller
), job AS (
    INSERT INTO jobs (id, tenant, kind, payload, max_attempts, timeout_seconds,
                      idempotency_key, request_hash)
    SELECT f.id, %(tenant)s, f.kind, f.payload, f.max_attempts, f.timeout_seconds,
           f.idempotency_key, f.request_hash
    FROM fresh f, verdict v
    WHERE v.key_ok AND v.rate_ok AND v.flight_ok AND v.conflict_ord IS NULL
    ORDER BY f.ord
    ON CONFLICT (tenant, idempotency_key) DO NOTHING
    RETURNING *
), ev AS (
    INSERT INTO job_events (job_id, from_state, to_state, attempt, detail)
    SELECT id, NULL, 'queued', 0, 'accepted' FROM job
), box AS (
    INSERT INTO outbox (job_id) SELECT id FROM job RETURNING id, job_id
)
SELECT v.key_ok, v.rate_ok, v.wait_seconds, v.rate, v.burst, v.wanted, v.flight_ok,
       v.max_in_flight, v.conflict_ord, job.*, box.id AS outbox_id
FROM verdict v LEFT JOIN (job JOIN box ON box.job_id = job.id) ON true;

-- name: jobs_by_idempotency_keys
SELECT * FROM jobs WHERE tenant = %(tenant)s AND idempotency_key = ANY(%(idempotency_keys)s::text[]);

-- name: get_job
SELECT * FROM jobs WHERE id = %(id)s;

-- name: get_job_for_tenant
-- A NULL tenant is the operator's view (an admin key, the CLI): every tenant.
SELECT * FROM jobs WHERE id = %(id)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text);

-- name: list_jobs
-- Keyset pagination, newest first; the cursor is (created_at, id) of the last row seen.
SELECT * FROM jobs
WHERE (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)
  AND (%(state)s::job_state IS NULL OR state = %(state)s::job_state)
  AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
  AND (%(after_created)s::timestamptz IS NULL
       OR (created_at, id) < (%(after_created)s::timestamptz, %(after_id)s::uuid))
ORDER BY created_at DESC, id DESC
LIMIT %(limit)s;

-- name: job_events
SELECT * FROM job_events WHERE job_id = %(id)s ORDER BY id;

-- name: job_effects
SELECT * FROM effects WHERE job_id = %(id)s ORDER BY seq;

-- name: mark_outbox_sent
UPDATE outbox SET sent_at = now(), send_attempts = send_attempts + 1
WHERE id = ANY(%(ids)s) AND sent_at IS NULL;

-- name: note_outbox_failure
UPDATE outbox SET send_attempts = send_attempts + 1, last_error = %(error)s
WHERE id = ANY(%(ids)s);

-- name: take_unsent_outbox
-- Rows the fast path did not send; SKIP LOCKED lets several relays share the work.
SELECT id, job_id FROM outbox
WHERE sent_at IS NULL AND created_at < now() - make_interval(secs => %(grace)s)
ORDER BY created_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: claim_batch
-- One statement for a batch of deliveries: claim each job with a fresh fencing token,
-- count the attempt, write the event. Rows are locked in id order, so two batches that
-- share jobs cannot deadlock. Claimable: queued, retrying, stalled; leased/running with
-- an expired lease; a dead_lettered job when this delivery is a redrive (then the
-- attempt budget restarts). Two deliveries of one job in a batch: one claim wins, the
-- other finds the winner's live lease (a duplicate). The caller matches rows by token.
WITH input AS (
    SELECT * FROM unnest(%(ids)s::uuid[], %(tokens)s::uuid[], %(generations)s::int[])
        AS t(id, token, generation)
), target AS (
    SELECT j.id, j.state AS from_state FROM jobs j
    WHERE j.id IN (SELECT id FROM input)
    ORDER BY j.id
    FOR UPDATE OF j
), claimed AS (
    UPDATE jobs j
    SET state = 'leased',
        attempt = CASE WHEN j.state = 'dead_lettered' THEN 1 ELSE j.attempt + 1 END,
        redrives = j.redrives + CASE WHEN j.state = 'dead_lettered' THEN 1 ELSE 0 END,
        dead_lettered_by = NULL,
        lease_owner = %(owner)s,
        lease_token = i.token,
        lease_expires_at = now() + make_interval(secs => %(lease_seconds)s),
        updated_at = now()
    FROM target t, input i
    WHERE j.id = t.id AND i.id = t.id
      AND NOT j.cancel_requested
      AND (j.state IN ('queued', 'retrying', 'stalled')
           OR (j.state IN ('leased', 'running') AND j.lease_expires_at <= now())
           OR (j.state = 'dead_lettered'
               AND (i.generation = j.redrives OR j.dead_lettered_by = 'sweeper')))
    RETURNING j.*, t.from_state
), ev AS (
    INSERT INTO job_events (job_id, from_state, to_state, attempt, worker, detail)
    SELECT id, from_state, 'leased', attempt, lease_owner,
           CASE WHEN from_state = 'dead_lettered' THEN 'redriven' END
    FROM claimed
)
SELECT * FROM claimed;

-- name: start_batch
-- leased -> running for a batch, with each job's recorded effects, in one round trip.
WITH input AS (
    SELECT * FROM unnest(%(ids)s::uuid[], %(tokens)s::uuid[]) AS t(id, token)
), started AS (
    UPDATE jobs j SET state = 'running', started_at = coalesce(j.started_at, now()), updated_at = now()
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

-- name: record_effect
-- Fenced: only the lease holder records. ON CONFLICT: the first record wins.
-- FOR SHARE waits for a claim in progress and checks the token again once it
-- commits (READ COMMITTED would otherwise read the row as the statement began).
INSERT INTO effects (job_id, key, seq, result, attempt, worker)
SELECT j.id, %(key)s, %(seq)s, %(result)s, j.attempt, j.lease_owner
FROM jobs j
WHERE j.id = %(id)s AND j.lease_token = %(token)s AND j.state = 'running'
FOR SHARE OF j
ON CONFLICT (job_id, key) DO NOTHING
RETURNING result;

-- name: get_effect
SELECT * FROM effects WHERE job_id = %(id)s AND key = %(key)s;

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
RETURNING j.id;

-- name: cancel_waiting
-- A job no live lease holds is cancelled at once: waiting, dead-lettered, or its lease expired.
WITH target AS (
    SELECT id, state AS from_state FROM jobs WHERE id = %(id)s FOR UPDATE
), done AS (
    UPDATE jobs j
    SET state = 'cancelled', cancel_requested = true, finished_at = now(), updated_at = now(),
        lease_token = NULL, lease_expires_at = NULL
    FROM target t
    WHERE j.id = t.id
      AND (j.state IN ('queued', 'retrying', 'stalled', 'dead_lettered')
           OR (j.state IN ('leased', 'running') AND j.lease_expires_at <= now()))
    RETURNING j.id, t.from_state, j.attempt
), ev AS (
    INSERT INTO job_events (job_id, from_state, to_state, attempt, detail)
    SELECT id, from_state, 'cancelled', attempt, %(detail)s FROM done
)
SELECT count(*) AS changed FROM done;

-- name: request_cancel
-- A job under a live lease: ask its worker to stop; the heartbeat sees the flag.
UPDATE jobs SET cancel_requested = true, updated_at = now()
WHERE id = %(id)s AND state IN ('leased', 'running')
RETURNING id;

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
WITH r AS (
    UPDATE jobs
    SET state = 'queued', attempt = 0, redrives = redrives + 1, dead_lettered_by = NULL,
        cancel_requested = false,
        finished_at = NULL, lease_token = NULL, lease_expires_at = NULL, updated_at = now()
    WHERE id = ANY(%(ids)s) AND state = 'dead_lettered'
    RETURNING id
), ev AS (
    INSERT INTO job_events (job_id, from_state, to_state, attempt, detail)
    SELECT id, 'dead_lettered', 'queued', 0, %(detail)s FROM r
), box AS (
    INSERT INTO outbox (job_id) SELECT id FROM r WHERE %(with_outbox)s RETURNING id, job_id
)
SELECT r.id, box.id AS outbox_id FROM r LEFT JOIN box ON box.job_id = r.id;

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
    RETURNING j.id, t.state AS from_state, j.attempt, j.lease_owner
), ev AS (
    INSERT INTO job_events (job_id, from_state, to_state, attempt, worker, detail)
    SELECT id, from_state, 'dead_lettered', attempt, lease_owner,
           'worker never finished: moved to the DLQ by the redrive policy' FROM moved
)
SELECT id FROM moved;

-- name: waiting_jobs
-- Jobs that need a message: used when a queue was created anew (the embedded default).
SELECT id FROM jobs
WHERE state IN ('queued', 'retrying', 'stalled', 'leased', 'running') AND NOT cancel_requested
ORDER BY created_at;

-- name: jobs_by_ids
SELECT * FROM jobs WHERE id = ANY(%(ids)s);

-- name: api_key
SELECT id, tenant, admin, salt, secret_hash, revoked_at FROM api_keys WHERE id = %(id)s;

-- name: insert_api_key
INSERT INTO api_keys (id, tenant, name, admin, salt, secret_hash)
VALUES (%(id)s, %(tenant)s, %(name)s, %(admin)s, %(salt)s, %(secret_hash)s)
RETURNING id, tenant, name, admin, created_at, revoked_at;

-- name: list_api_keys
SELECT id, tenant, name, admin, created_at, revoked_at FROM api_keys
WHERE (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)
ORDER BY tenant, created_at, id;

-- name: revoke_api_key
-- Revoking twice keeps the first time.
UPDATE api_keys SET revoked_at = coalesce(revoked_at, now())
WHERE id = %(id)s
RETURNING id, tenant, name, admin, created_at, revoked_at;

-- name: set_tenant_limits
-- Only the limits given change; the others keep their value (NULL: the default).
INSERT INTO tenant_limits AS t (tenant, rate_per_second, burst, max_in_flight)
VALUES (%(tenant)s, %(rate_per_second)s, %(burst)s, %(max_in_flight)s)
ON CONFLICT (tenant) DO UPDATE SET
    rate_per_second = coalesce(EXCLUDED.rate_per_second, t.rate_per_second),
    burst = coalesce(EXCLUDED.burst, t.burst),
    max_in_flight = coalesce(EXCLUDED.max_in_flight, t.max_in_flight),
    updated_at = now()
RETURNING *;

-- name: clear_tenant_limits
DELETE FROM tenant_limits WHERE tenant = %(tenant)s RETURNING tenant;

-- name: list_tenant_limits
-- Every tenant that has a key or an override, with its overrides and its unfinished jobs.
SELECT names.tenant, t.rate_per_second, t.burst, t.max_in_flight,
       (SELECT count(*) FROM jobs j
        WHERE j.tenant = names.tenant
          AND j.state IN ('queued', 'leased', 'running', 'retrying', 'stalled')) AS in_flight
FROM (SELECT tenant FROM api_keys UNION SELECT tenant FROM tenant_limits) AS names
LEFT JOIN tenant_limits t ON t.tenant = names.tenant
ORDER BY names.tenant;
