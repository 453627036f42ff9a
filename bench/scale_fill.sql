-- A year of history for the scale phase (bench/scale.py), generated in SQL: jobs of
-- several tenants and states with their events, effects and sent outbox rows. Every
-- index, constraint and trigger stays on (a real database has them all). The size is
-- the setting fill.jobs, numbered from fill.first (a second fill adds to a first);
-- fill.tenant is the big tenant's name (half of the jobs).
-- Steps are separated by "-- step: NAME" lines; bench/scale.py runs them one by one.

-- step: jobs
-- Job g was created at a point of the year before now, oldest first, a few seconds of
-- jitter; 20 tenants, the big one half of them. Final states: 1 in fill.dead_every
-- dead-lettered, 1 in fill.cancel_every cancelled, the last fill.waiting jobs still
-- waiting on a timer days ahead (unfinished work: the in-flight cap counts it), the
-- rest succeeded; 1 in 17 took 2 attempts.
-- Jobs come in runs of 50 of one tenant (a hash of n / 50 picks it). One in five carries
-- an idempotency key; 1 in 50 was spawned by the first job of its run (ids are md5s of
-- the job's number, so the parent's id is known here).
INSERT INTO jobs (id, tenant, kind, payload, state, attempt, max_attempts, timeout_seconds,
                  idempotency_key, request_hash, result, last_error, cancel_requested,
                  dead_lettered_by, created_at, updated_at, started_at, finished_at, runs,
                  wait_kind, wait_key, wake_at, wake_sent_at, priority, parent_id, spawn_key)
SELECT g.id, g.tenant, g.kind, jsonb_build_object('n', g.n, 'text', md5(g.n::text)),
       g.state, CASE WHEN g.state = 'waiting' THEN 0 ELSE g.attempts END, 5, 300,
       CASE WHEN g.n % 5 = 0 THEN 'key-' || g.n END, md5(g.n::text),
       CASE WHEN g.state = 'succeeded' THEN jsonb_build_object('ok', true, 'n', g.n) END,
       CASE WHEN g.state = 'dead_lettered' THEN 'boom: attempt 5 of 5 failed'
            WHEN g.attempts > 1 THEN 'transient failure' END,
       g.state = 'cancelled',
       CASE WHEN g.state = 'dead_lettered' THEN 'engine' END,
       g.created, g.created + g.took, g.created + interval '20 ms',
       CASE WHEN g.state IN ('succeeded', 'cancelled', 'dead_lettered')
            THEN g.created + g.took END,
       CASE WHEN g.state = 'waiting' THEN 1 ELSE g.attempts END,
       CASE WHEN g.state = 'waiting' THEN 'timer' END,
       CASE WHEN g.state = 'waiting' THEN 'sleep' END,
       CASE WHEN g.state = 'waiting' THEN now() + (1 + g.n % 30) * interval '1 day' END,
       NULL,
       (ARRAY['normal', 'normal', 'normal', 'high', 'low'])[1 + g.n % 5],
       CASE WHEN g.n % 50 = 10 AND g.n - 10 >= g.first THEN md5('job-' || (g.n - 10))::uuid END,
       CASE WHEN g.n % 50 = 10 AND g.n - 10 >= g.first THEN 'child' END
FROM (
    SELECT n, first, md5('job-' || n)::uuid AS id,
           CASE WHEN abs(hashint4(n / 50)) % 38 < 19 THEN current_setting('fill.tenant')
                ELSE 'tenant-' || lpad((abs(hashint4(n / 50)) % 38 - 18)::text, 2, '0') END AS tenant,
           (ARRAY['demo.noop', 'demo.echo', 'demo.sleep', 'demo.fail', 'demo.model'])[1 + n % 5] AS kind,
           CASE WHEN n % current_setting('fill.dead_every')::int = 7 THEN 'dead_lettered'
                WHEN n - first >= total - current_setting('fill.waiting')::int THEN 'waiting'
                WHEN n % current_setting('fill.cancel_every')::int = 11 THEN 'cancelled'
                ELSE 'succeeded' END::job_state AS state,
           CASE WHEN n % current_setting('fill.dead_every')::int = 7 THEN 5
                WHEN n % 17 = 0 THEN 2 ELSE 1 END AS attempts,
           now() - interval '365 days' * (1 - (n - first + 1)::float8 / total) - interval '1 hour'
               + (n % 7) * interval '1 second' AS created,
           (50 + n % 3000) * interval '1 ms' AS took
    FROM (SELECT current_setting('fill.jobs')::int AS total,
                 current_setting('fill.first')::int AS first) t,
         generate_series(t.first, t.first + t.total - 1) AS n
) g;

-- step: charts
-- The charts' rows (migration 0027) as a year of running leaves them: the jobs step's
-- trigger counted each job submitted, a year of minutes, of which retention keeps the
-- last 8 days (the week's hours); the jobs were inserted finished, so no trigger saw them
-- end: their last 8 days' ends, failed attempts (one a retry) and latencies are counted
-- here as the update trigger would have. The first read or sweep folds them.
DELETE FROM chart_deltas WHERE at < now() - interval '8 days';
INSERT INTO chart_deltas (at, tenant, kind, series, bucket, n)
SELECT date_bin('1 minute', j.finished_at, timestamptz 'epoch'), j.tenant, j.kind, s.series,
       s.bucket, sum(s.n)
FROM jobs j, LATERAL (VALUES
    (j.state::text, 0::smallint, 1),
    ('failed', 0::smallint, j.attempt - 1),
    ('latency', chart_bucket(extract(epoch FROM j.finished_at - j.created_at)::float8), 1),
    ('run', chart_bucket(extract(epoch FROM j.finished_at - j.started_at)::float8), 1)
) AS s (series, bucket, n)
WHERE j.state IN ('succeeded', 'dead_lettered') AND j.finished_at >= now() - interval '8 days'
  AND (j.payload ->> 'n')::int >= current_setting('fill.first')::int AND s.n > 0
GROUP BY 1, 2, 3, 4, 5;

-- step: events
-- Four transitions a job: accepted, leased, running, then where it ended. (This fill's
-- jobs only: the number in their payload.)
INSERT INTO job_events (job_id, at, from_state, to_state, attempt, worker, detail)
SELECT j.id, j.created_at + s.i * interval '10 ms',
       (ARRAY[NULL, 'queued', 'leased', 'running'])[s.i]::job_state,
       (ARRAY['queued', 'leased', 'running', j.state::text])[s.i]::job_state,
       CASE WHEN s.i = 1 THEN 0 ELSE 1 END,
       CASE WHEN s.i > 1 THEN 'worker-' || (j.payload ->> 'n')::int % 8 END,
       CASE WHEN s.i = 1 THEN 'accepted' END
FROM jobs j, generate_series(1, 4) AS s(i)
WHERE (j.payload ->> 'n')::int >= current_setting('fill.first')::int;

-- step: effects
-- One job in three recorded an effect; one in fifteen a model call with its tokens.
INSERT INTO effects (job_id, key, seq, result, attempt, worker, recorded_at, model,
                     input_tokens, output_tokens)
SELECT j.id, 'step-1', 1, jsonb_build_object('ok', true), 1, 'worker-1',
       j.created_at + interval '30 ms',
       CASE WHEN (j.payload ->> 'n')::int % 15 = 0 THEN 'openai/gpt-4o-mini' END,
       CASE WHEN (j.payload ->> 'n')::int % 15 = 0 THEN 800 END,
       CASE WHEN (j.payload ->> 'n')::int % 15 = 0 THEN 200 END
FROM jobs j WHERE (j.payload ->> 'n')::int % 3 = 0
  AND (j.payload ->> 'n')::int >= current_setting('fill.first')::int;

-- step: outbox
-- Each job's message, sent just after its commit (a waiting job's timer is not due).
INSERT INTO outbox (job_id, created_at, sent_at, send_attempts)
SELECT id, created_at, created_at + interval '5 ms', 1 FROM jobs j
WHERE state <> 'waiting' AND (j.payload ->> 'n')::int >= current_setting('fill.first')::int;
