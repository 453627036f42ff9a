-- The jobs aggregate: admission and insert, reads, listing, cancelling.
-- Named queries of app/store/jobs.py. Each starts with "-- name: NAME"; app/store/sql
-- loads every file of this folder. Parameters are always bound (%(name)s), never
-- formatted into the text.

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
-- A job asked to run later (run_at, or delay_seconds from the database's clock) is
-- written `waiting` on a timer (wait_key 'run_at') with no outbox row: the caller sends
-- its delayed wake-up after the commit, or the sweeper does (wake_sent_at is NULL). A
-- due time already past runs now, as any job.
-- The tenant's window on the queue (migration 0013): a job to run now past it is written
-- parked, with no outbox row; one of the tenant's leases ending releases it.
WITH caller AS (
    SELECT %(key_id)s::text IS NULL
           OR EXISTS (SELECT 1 FROM api_keys k
                      WHERE k.id = %(key_id)s::text AND k.revoked_at IS NULL) AS key_ok
), lim AS (
    SELECT coalesce(t.rate_per_second, %(rate)s::float8) AS rate,
           coalesce(t.burst, %(burst)s::int) AS burst,
           coalesce(t.max_in_flight, %(max_in_flight)s::int) AS max_in_flight,
           coalesce(t.max_running, %(max_running)s::int) * %(window_per_slot)s::int AS queue_window
    FROM (SELECT 1) AS one LEFT JOIN tenant_limits t ON t.tenant = %(tenant)s
), input AS (
    SELECT * FROM unnest(%(ids)s::uuid[], %(kinds)s::text[], %(payloads)s::jsonb[],
                         %(max_attempts)s::int[], %(timeouts)s::int[],
                         %(idempotency_keys)s::text[], %(request_hashes)s::text[],
                         %(run_ats)s::timestamptz[], %(delays)s::float8[],
                         %(trace_contexts)s::text[], %(priorities)s::text[],
                         %(deadlines)s::timestamptz[], %(deadline_seconds)s::float8[],
                         %(rerun_ofs)s::uuid[], %(forked_froms)s::uuid[],
                         %(fork_steps)s::text[], %(notes)s::text[],
                         %(flow_keys)s::text[], %(key_concurrencies)s::int[],
                         %(key_rates)s::int[], %(key_rate_seconds)s::float8[],
                         %(debounces)s::float8[])
        WITH ORDINALITY AS t(id, kind, payload, max_attempts, timeout_seconds,
                             idempotency_key, request_hash, run_at, delay, trace_context,
                             priority, deadline_at, deadline_seconds, rerun_of, forked_from,
                             fork_step, note, flow_key, key_concurrency, key_rate,
                             key_rate_seconds, debounce, ord)
), timed AS (
    -- The run's deadline (migration 0022): a time, or seconds from the database's now.
    -- A debounced job (migration 0030) waits its window on a timer (wait_key 'debounce').
    -- A delay or a debounce counts from this statement's start, not the transaction's: a
    -- submission to a key runs this after waiting for the key's lock (lock_flow_keys),
    -- and a window counted from before that wait would end that much early. A deadline
    -- stays created_at plus its seconds, as the API answers it.
    SELECT i.*, w.wake_at, coalesce(w.wake_at > statement_timestamp(), false) AS delayed,
           coalesce(i.deadline_at, now() + make_interval(secs => i.deadline_seconds)) AS deadline
    FROM input i,
         LATERAL (SELECT coalesce(i.run_at, statement_timestamp()
                                  + make_interval(secs => coalesce(i.delay, i.debounce)))
                  AS wake_at) w
), replay AS (
    -- Each key looked up in the (tenant, key) index: a join here could scan the tenant's
    -- every job (a plan made before the table's statistics caught up chose that).
    SELECT i.ord, r.same FROM input i
    CROSS JOIN LATERAL (SELECT j.request_hash = i.request_hash AS same FROM jobs j
                        WHERE j.tenant = %(tenant)s AND j.idempotency_key = i.idempotency_key
                        LIMIT 1) r
    WHERE i.idempotency_key IS NOT NULL
), on_queue AS (
    -- Counted up to the window only, from its own partial index.
    SELECT count(*) AS n FROM (
        SELECT 1 FROM jobs
        WHERE tenant = %(tenant)s AND NOT parked
          AND state IN ('queued', 'retrying', 'stalled', 'leased', 'running')
        LIMIT (SELECT queue_window FROM lim)
    ) AS sent
), fresh AS (
    SELECT t.*,
           NOT t.delayed
           AND (SELECT n FROM on_queue)
               + count(*) FILTER (WHERE NOT t.delayed) OVER (ORDER BY t.ord)
               > (SELECT queue_window FROM lim) AS parked
    FROM timed t WHERE t.ord NOT IN (SELECT ord FROM replay)
), wanted AS (
    SELECT count(*) AS n FROM fresh
), since AS (
    -- The counts this process made last (`known_at`: that statement's now(); NULL: none
    -- recent) bound today's: the window and the unfinished jobs have grown since by at
    -- most the tenant's jobs created after it (children and re-runs too; a margin back
    -- covers submissions that began before it and committed after it). Counting those
    -- few instead of the whole window is what keeps a submission's cost flat under a
    -- high limit (issue 37: 2,500 rows a submission at the bench's burst of 1,000,000).
    SELECT count(*) AS n FROM jobs
    WHERE %(known_at)s::timestamptz IS NOT NULL AND tenant = %(tenant)s
      AND created_at > %(known_at)s::timestamptz - interval '250 milliseconds'
), bound AS (
    SELECT %(known_at)s::timestamptz IS NOT NULL
           AND %(known_recent)s::int + since.n + wanted.n <= lim.burst AS rate_ok,
           %(known_at)s::timestamptz IS NOT NULL
           AND %(known_flight)s::int + since.n + wanted.n <= lim.max_in_flight AS flight_ok
    FROM lim, since, wanted
), recent AS (
    -- The tenant's newest `burst` jobs inside the window (an index range scan), counted
    -- only when the bound above does not already admit the new jobs.
    SELECT j.created_at FROM jobs j
    WHERE NOT (SELECT rate_ok FROM bound)
      AND j.tenant = %(tenant)s
      AND j.created_at > now() - make_interval(secs => (SELECT burst / rate FROM lim))
    ORDER BY j.created_at DESC
    LIMIT (SELECT burst FROM lim)
), flight AS (
    -- Counted up to the cap only, and only when the bound does not already admit them.
    SELECT count(*) AS n FROM (
        SELECT 1 FROM jobs
        WHERE NOT (SELECT flight_ok FROM bound)
          AND tenant = %(tenant)s
          AND state IN ('queued', 'leased', 'running', 'retrying', 'stalled', 'waiting')
        LIMIT (SELECT max_in_flight FROM lim)
    ) AS unfinished
), counts AS (
    SELECT wanted.n AS wanted, (SELECT count(*) FROM recent) AS recent FROM wanted
), verdict AS (
    SELECT bound.rate_ok OR counts.recent + counts.wanted <= lim.burst AS rate_ok,
           -- When enough of the oldest in the window have left it for the new jobs to fit.
           extract(epoch FROM (SELECT created_at FROM recent ORDER BY created_at
                               OFFSET greatest(0, counts.recent + counts.wanted - lim.burst - 1)
                               LIMIT 1)
                              + make_interval(secs => lim.burst / lim.rate) - now()) AS wait_seconds,
           lim.rate AS rate, lim.burst AS burst, counts.wanted AS wanted,
           bound.flight_ok OR flight.n + counts.wanted <= lim.max_in_flight AS flight_ok,
           lim.max_in_flight AS max_in_flight,
           (SELECT min(ord) FROM replay WHERE NOT same) AS conflict_ord,
           caller.key_ok AS key_ok,
           -- What this statement counted in full, for the caller's next bound (NULL: the
           -- bound admitted without it), and when (its now()).
           CASE WHEN NOT bound.rate_ok THEN counts.recent END AS counted_recent,
           CASE WHEN NOT bound.flight_ok THEN flight.n END AS counted_flight,
           now() AS counted_at,
           -- A fork's step is still among its original's effects (a prune may have
           -- taken the original since the caller looked): else nothing is written.
           NOT EXISTS (SELECT 1 FROM input i WHERE i.fork_step IS NOT NULL
                       AND NOT EXISTS (SELECT 1 FROM effects e WHERE e.job_id = i.forked_from
                                       AND e.key = i.fork_step)) AS fork_ok
    FROM lim, flight, counts, caller, bound
), job AS (
    INSERT INTO jobs (id, tenant, kind, payload, max_attempts, timeout_seconds,
                      idempotency_key, request_hash, state, wait_kind, wait_key, wake_at,
                      trace_context, priority, parked, deadline, rerun_of, forked_from,
                      fork_step, flow_key, key_concurrency, key_rate, key_rate_seconds)
    SELECT f.id, %(tenant)s, f.kind, f.payload, f.max_attempts, f.timeout_seconds,
           f.idempotency_key, f.request_hash,
           CASE WHEN f.delayed THEN 'waiting' ELSE 'queued' END::job_state,
           CASE WHEN f.delayed THEN 'timer' END,
           CASE WHEN f.delayed AND f.debounce IS NOT NULL THEN 'debounce'
                WHEN f.delayed THEN 'run_at' END,
           CASE WHEN f.delayed THEN f.wake_at END, f.trace_context, f.priority, f.parked,
           f.deadline, f.rerun_of, f.forked_from, f.fork_step, f.flow_key, f.key_concurrency,
           f.key_rate, f.key_rate_seconds
    FROM fresh f, verdict v
    WHERE v.key_ok AND v.rate_ok AND v.flight_ok AND v.conflict_ord IS NULL AND v.fork_ok
    ORDER BY f.ord
    ON CONFLICT (tenant, idempotency_key) DO NOTHING
    RETURNING *
), ev AS (
    INSERT INTO job_events (job_id, from_state, to_state, attempt, detail)
    SELECT id, NULL, state, 0,
           CASE WHEN state = 'waiting' AND wait_key = 'debounce'
                THEN 'accepted, debounced: runs at ' || wake_at::text
                     || ' unless a newer job of its key replaces it'
                WHEN state = 'waiting' THEN 'accepted: runs at ' || wake_at::text
                WHEN parked THEN 'accepted, parked: the tenant''s window on the queue is full '
                                 '(its running cap x TASKLEASE_QUEUE_WINDOW_PER_SLOT), sent '
                                 'when one of its leases ends'
                ELSE 'accepted' END
           -- Who made it and from what (a re-run's, a fork's): the job's own record.
           || coalesce(', ' || (SELECT f.note FROM fresh f WHERE f.id = job.id), '')
    FROM job
), inherit AS (
    -- A fork: the original's effects recorded before its step (the effects' order:
    -- seq, recorded_at, key), or all of them (no step: after the last), copied into the
    -- new job, each marked with the job that recorded it (a fork of a fork: the first).
    INSERT INTO effects (job_id, key, seq, result, attempt, worker, recorded_at, model,
                         input_tokens, output_tokens, inherited_from, shape)
    SELECT job.id, e.key, e.seq, e.result, e.attempt, e.worker, e.recorded_at, e.model,
           e.input_tokens, e.output_tokens, coalesce(e.inherited_from, e.job_id), e.shape
    FROM job
    JOIN effects e ON e.job_id = job.forked_from
    LEFT JOIN effects s ON s.job_id = job.forked_from AND s.key = job.fork_step
    WHERE job.fork_step IS NULL
       OR (e.seq, e.recorded_at, e.key) < (s.seq, s.recorded_at, s.key)
), box AS (
    INSERT INTO outbox (job_id) SELECT id FROM job WHERE state = 'queued' AND NOT parked
    RETURNING id, job_id
)
SELECT v.key_ok, v.rate_ok, v.wait_seconds, v.rate, v.burst, v.wanted, v.flight_ok,
       v.max_in_flight, v.conflict_ord, v.fork_ok, v.counted_recent, v.counted_flight,
       v.counted_at, job.*, box.id AS outbox_id
FROM verdict v LEFT JOIN (job LEFT JOIN box ON box.job_id = job.id) ON true;

-- name: mark_delayed_wakeups
-- After the commit of delayed jobs: those due within SQS's delay cap whose wake-up nobody
-- sent yet (the sweeper may have, meanwhile) are marked sent, with their delay; the
-- caller sends them. The others are the sweeper's (wake_sent_at stays NULL).
UPDATE jobs SET wake_sent_at = now()
WHERE id = ANY(%(ids)s::uuid[]) AND state = 'waiting' AND wait_kind = 'timer'
  AND wake_sent_at IS NULL AND NOT cancel_requested
  AND wake_at <= now() + make_interval(secs => %(cap)s)
RETURNING id, tenant, priority, greatest(0, extract(epoch FROM wake_at - now()))::float8 AS delay;

-- name: job_routes
-- Where each job's messages go: its priority's queue, its tenant's message group.
SELECT id, tenant, priority FROM jobs WHERE id = ANY(%(ids)s::uuid[]);

-- name: jobs_by_idempotency_keys
SELECT * FROM jobs WHERE tenant = %(tenant)s AND idempotency_key = ANY(%(idempotency_keys)s::text[]);

-- name: get_job
SELECT * FROM jobs WHERE id = %(id)s;

-- name: get_job_for_tenant
-- A NULL tenant is the operator's view (an admin key, the CLI): every tenant.
SELECT * FROM jobs WHERE id = %(id)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text);

-- name: list_jobs
-- Keyset pagination, newest first; the cursor is (created_at, id) of the last row seen.
-- One branch per scope (a tenant or all; a state or any), each an index range from the
-- cursor on (migration 0019): the branches not asked for are gated off by a one-time
-- test of their parameters, so a prepared statement's generic plan (PostgreSQL switches
-- to one after five runs) reads only the page too, never a walk from the newest job.
-- (The kind filter reads the rows of the scope and skips other kinds.)
WITH page AS (
    (SELECT j.* FROM jobs j
     WHERE %(tenant)s::text IS NOT NULL AND %(state)s::job_state IS NOT NULL
       AND j.tenant = %(tenant)s::text AND j.state = %(state)s::job_state
       AND (j.created_at, j.id) < (coalesce(%(after_created)s::timestamptz, 'infinity'),
                                  coalesce(%(after_id)s::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff'))
       AND (%(kind)s::text IS NULL OR j.kind = %(kind)s::text)
     ORDER BY j.created_at DESC, j.id DESC LIMIT %(limit)s)
    UNION ALL
    (SELECT j.* FROM jobs j
     WHERE %(tenant)s::text IS NOT NULL AND %(state)s::job_state IS NULL
       AND j.tenant = %(tenant)s::text
       AND (j.created_at, j.id) < (coalesce(%(after_created)s::timestamptz, 'infinity'),
                                  coalesce(%(after_id)s::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff'))
       AND (%(kind)s::text IS NULL OR j.kind = %(kind)s::text)
     ORDER BY j.created_at DESC, j.id DESC LIMIT %(limit)s)
    UNION ALL
    (SELECT j.* FROM jobs j
     WHERE %(tenant)s::text IS NULL AND %(state)s::job_state IS NOT NULL
       AND j.state = %(state)s::job_state
       AND (j.created_at, j.id) < (coalesce(%(after_created)s::timestamptz, 'infinity'),
                                  coalesce(%(after_id)s::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff'))
       AND (%(kind)s::text IS NULL OR j.kind = %(kind)s::text)
     ORDER BY j.created_at DESC, j.id DESC LIMIT %(limit)s)
    UNION ALL
    (SELECT j.* FROM jobs j
     WHERE %(tenant)s::text IS NULL AND %(state)s::job_state IS NULL
       AND (j.created_at, j.id) < (coalesce(%(after_created)s::timestamptz, 'infinity'),
                                  coalesce(%(after_id)s::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff'))
       AND (%(kind)s::text IS NULL OR j.kind = %(kind)s::text)
     ORDER BY j.created_at DESC, j.id DESC LIMIT %(limit)s)
)
SELECT * FROM page ORDER BY created_at DESC, id DESC LIMIT %(limit)s;

-- name: job_events
SELECT * FROM job_events WHERE job_id = %(id)s ORDER BY id;

-- name: jobs_by_ids
SELECT * FROM jobs WHERE id = ANY(%(ids)s);

-- name: cancel_waiting
-- A job no live lease holds is cancelled at once: waiting, dead-lettered, or its lease expired.
WITH target AS (
    SELECT id, state AS from_state FROM jobs WHERE id = %(id)s FOR UPDATE
), done AS (
    UPDATE jobs j
    SET state = 'cancelled', cancel_requested = true, finished_at = now(), updated_at = now(),
        lease_token = NULL, lease_expires_at = NULL,
        wait_kind = NULL, wait_key = NULL, wake_at = NULL, wait_rule = NULL
    FROM target t
    WHERE j.id = t.id
      AND (j.state IN ('queued', 'retrying', 'stalled', 'waiting', 'dead_lettered')
           OR (j.state IN ('leased', 'running') AND j.lease_expires_at <= now()))
    RETURNING j.id, t.from_state, j.attempt, j.kind, j.created_at
), ev AS (
    INSERT INTO job_events (job_id, from_state, to_state, attempt, detail)
    SELECT id, from_state, 'cancelled', attempt, %(detail)s FROM done
)
-- What app/store/endings.py counts; cascade: its trigger cancelled children.
SELECT id, kind, created_at, 'cancelled' AS to_state,
       EXISTS (SELECT 1 FROM jobs c WHERE c.parent_id = done.id) AS cascade
FROM done;

-- name: request_cancel
-- A job under a live lease: ask its worker to stop; the heartbeat sees the flag.
-- The flag's trigger cancels the job's children no live lease holds at once (cascade).
UPDATE jobs SET cancel_requested = true, updated_at = now()
WHERE id = %(id)s AND state IN ('leased', 'running')
RETURNING id, kind, created_at, state::text AS to_state,
          EXISTS (SELECT 1 FROM jobs c WHERE c.parent_id = jobs.id) AS cascade;

-- name: waiting_jobs
-- Jobs that need a message: used when a queue was created anew (the embedded default).
-- A parked job has none by design: a release sends it.
SELECT id, tenant, priority FROM jobs
WHERE state IN ('queued', 'retrying', 'stalled', 'leased', 'running') AND NOT cancel_requested
  AND NOT parked
ORDER BY created_at;

-- name: reruns_of
-- The jobs re-run or forked from this one, oldest first (each from its partial index).
SELECT * FROM (
    (SELECT * FROM jobs WHERE rerun_of = %(id)s ORDER BY created_at, id LIMIT %(limit)s)
    UNION ALL
    (SELECT * FROM jobs WHERE forked_from = %(id)s ORDER BY created_at, id LIMIT %(limit)s)
) AS made ORDER BY created_at, id LIMIT %(limit)s;

-- name: jobs_made_from
-- A re-run or fork of a job made under an Idempotency-Key (its retry answers it again,
-- whatever became of the original since): by the rerun_of and forked_from indexes.
SELECT * FROM jobs
WHERE (rerun_of = %(id)s OR forked_from = %(id)s) AND idempotency_key = %(key)s
  AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text);
