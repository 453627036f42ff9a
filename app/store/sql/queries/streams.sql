-- Streams: a job's output (fenced writes) and the ordered reads of transitions and output.
-- Named queries of app/store/streams.py. Each starts with "-- name: NAME"; app/store/sql
-- loads every file of this folder. Parameters are always bound (%(name)s), never
-- formatted into the text.
-- Order and cursors: (tx, id), read only below the oldest running transaction
-- (migration 0010 says why); a row written before 0010 has no tx and reads as tx 0.

-- name: append_output
-- Fenced: only the lease holder of a running job writes, and not once the job's cancel
-- was asked for: `fenced` says the fence let it write, `cancelled` that a cancel did not.
-- A chunk already written under (key, seq) is left as it is (once each).
WITH held AS (
    SELECT id, attempt, cancel_requested FROM jobs
    WHERE id = %(id)s AND lease_token = %(token)s AND state = 'running'
    FOR SHARE
), j AS (
    SELECT id, attempt FROM held WHERE NOT cancel_requested
), ins AS (
    INSERT INTO job_output (job_id, attempt, at, type, key, seq, data)
    SELECT j.id, j.attempt, o.at, o.type, o.key, o.seq, o.data
    FROM j, unnest(%(ats)s::timestamptz[], %(types)s::text[], %(keys)s::text[],
                   %(seqs)s::int[], %(datas)s::jsonb[]) WITH ORDINALITY AS o(at, type, key, seq, data, ord)
    ORDER BY o.ord
    ON CONFLICT (job_id, key, seq) DO NOTHING
    RETURNING 1
)
SELECT (SELECT count(*) FROM j) = 1 AS fenced,
       (SELECT count(*) FROM held WHERE cancel_requested) = 1 AS cancelled,
       (SELECT count(*) FROM ins) AS written;

-- name: stream_job
-- One job's transitions and output after the cursor, oldest first.
WITH horizon AS (SELECT pg_snapshot_xmin(pg_current_snapshot()) AS xmin), ev AS (
    SELECT coalesce(e.tx, '0'::xid8) AS tx, e.id, e.job_id, e.at, e.attempt,
           'transition'::text AS type, NULL::text AS key, NULL::int AS seq,
           jsonb_build_object('from_state', e.from_state, 'to_state', e.to_state,
                              'worker', e.worker, 'detail', e.detail) AS data
    FROM job_events e
    WHERE e.job_id = %(job)s
    UNION ALL
    SELECT o.tx, o.id, o.job_id, o.at, o.attempt, o.type, o.key, o.seq, o.data
    FROM job_output o
    WHERE o.job_id = %(job)s
)
SELECT ev.*, j.tenant, j.kind
FROM ev JOIN jobs j ON j.id = ev.job_id
WHERE (ev.tx, ev.id) > (%(tx)s::text::xid8, %(after)s::bigint)
  AND ev.tx < (SELECT xmin FROM horizon)
ORDER BY ev.tx, ev.id
LIMIT %(limit)s;

-- name: stream_tenant
-- Every job's transitions and output after the cursor (a tenant's, or all with a NULL
-- tenant), oldest first, and the horizon they were read below (one row with no event
-- when there is none: a reader whose tenant is quiet moves its cursor up to the
-- horizon, rather than reading other tenants' rows again at every wake-up). Rows from
-- before migration 0010 (no tx) are not in it.
WITH horizon AS (SELECT pg_snapshot_xmin(pg_current_snapshot()) AS xmin)
SELECT h.xmin AS horizon, found.*
FROM horizon h LEFT JOIN LATERAL (
    SELECT ev.*, j.tenant, j.kind
    FROM (
        SELECT e.tx, e.id, e.job_id, e.at, e.attempt,
               'transition'::text AS type, NULL::text AS key, NULL::int AS seq,
               jsonb_build_object('from_state', e.from_state, 'to_state', e.to_state,
                                  'worker', e.worker, 'detail', e.detail) AS data
        FROM job_events e
        WHERE (e.tx, e.id) > (%(tx)s::text::xid8, %(after)s::bigint) AND e.tx < h.xmin
        UNION ALL
        SELECT o.tx, o.id, o.job_id, o.at, o.attempt, o.type, o.key, o.seq, o.data
        FROM job_output o
        WHERE (o.tx, o.id) > (%(tx)s::text::xid8, %(after)s::bigint) AND o.tx < h.xmin
    ) AS ev
    JOIN jobs j ON j.id = ev.job_id
    WHERE %(tenant)s::text IS NULL OR j.tenant = %(tenant)s::text
    ORDER BY ev.tx, ev.id
    LIMIT %(limit)s
) AS found ON true
ORDER BY found.tx, found.id;

-- name: stream_horizon
-- Where a stream that starts now begins: every transaction from the oldest still running.
SELECT pg_snapshot_xmin(pg_current_snapshot()) AS tx;

-- name: stream_job_tail
-- The job's state and its last readable row: a stream of a finished job ends once its
-- reader's cursor is there.
WITH horizon AS (SELECT pg_snapshot_xmin(pg_current_snapshot()) AS xmin), last AS (
    SELECT tx, id FROM (
        (SELECT coalesce(tx, '0'::xid8) AS tx, id FROM job_events WHERE job_id = %(job)s
         ORDER BY coalesce(tx, '0'::xid8) DESC, id DESC LIMIT 1)
        UNION ALL
        (SELECT tx, id FROM job_output WHERE job_id = %(job)s ORDER BY tx DESC, id DESC LIMIT 1)
    ) AS both_tables
    ORDER BY tx DESC, id DESC LIMIT 1
)
SELECT j.state, last.tx AS last_tx, last.id AS last_id,
       coalesce(last.tx < (SELECT xmin FROM horizon), true) AS readable
FROM jobs j LEFT JOIN last ON true
WHERE j.id = %(job)s;

-- name: job_output
-- A job's output rows of one type (and key), in order: a streamed answer's recorded chunks.
SELECT * FROM job_output
WHERE job_id = %(job)s AND type = %(type)s AND (%(key)s::text IS NULL OR key = %(key)s::text)
ORDER BY tx, id;

-- name: overview
-- What the web view's overview shows: jobs by state (a tenant's, or all for NULL), from
-- the maintained counts (migration 0018), and the oldest queued job's age: an index
-- range over the queued jobs only, so its cost follows what is unfinished, not history.
WITH c AS (
    SELECT state, sum(n) AS n FROM (
        SELECT state, n FROM job_counts
        WHERE %(tenant)s::text IS NULL OR tenant = %(tenant)s::text
        UNION ALL
        SELECT state, n FROM job_count_deltas
        WHERE %(tenant)s::text IS NULL OR tenant = %(tenant)s::text
    ) AS parts
    GROUP BY state
)
SELECT s.state::text AS state, coalesce(c.n, 0) AS n,
       CASE WHEN s.state = 'queued' THEN (
           SELECT extract(epoch FROM now() - min(j.created_at)) FROM jobs j
           WHERE j.state = 'queued'
             AND (%(tenant)s::text IS NULL OR j.tenant = %(tenant)s::text)) END AS oldest_age
FROM unnest(enum_range(NULL::job_state)) AS s(state)
LEFT JOIN c ON c.state = s.state
ORDER BY s.state;

-- name: stream_hub_follow
-- A hub with readers: its row current for the seconds given (migration 0031), and the
-- rows of hubs gone for an hour dropped.
WITH gone AS (
    DELETE FROM stream_hubs WHERE until < now() - interval '1 hour'
)
INSERT INTO stream_hubs (hub, until)
VALUES (%(hub)s, now() + make_interval(secs => %(seconds)s))
ON CONFLICT (hub) DO UPDATE SET until = EXCLUDED.until;

-- name: stream_hub_leave
-- A hub closing: no wake-ups on its behalf.
DELETE FROM stream_hubs WHERE hub = %(hub)s;
