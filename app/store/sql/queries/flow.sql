-- Flow control by key at submission (app/services/flow.py): a submission whose kind
-- decides per key (if_active reject, cancel_active or drop_new; debounce) locks its keys,
-- looks at their jobs, writes the new job and cancels the ones it replaces, in one
-- transaction. Named queries of app/store/flow.py.

-- name: lock_flow_keys
-- The keys (tenant, kind, key) locked for the transaction, in one order (two submissions
-- never wait on each other in a circle): submissions to one key take turns, so each sees
-- the job the one before it wrote, and no two both find the key free.
SELECT count(pg_advisory_xact_lock(s.lock)) AS locked FROM (
    SELECT DISTINCT hashtextextended('tasklease.key:' || %(tenant)s || '/' || k.kind || '/'
                                     || k.key, 0) AS lock
    FROM unnest(%(kinds)s::text[], %(keys)s::text[]) AS k(kind, key)
    ORDER BY 1
) AS s;

-- name: open_on_keys
-- The jobs of these keys not finished, oldest first (by the key's partial index).
SELECT j.* FROM jobs j
JOIN unnest(%(kinds)s::text[], %(keys)s::text[]) AS k(kind, key)
  ON j.tenant = %(tenant)s AND j.kind = k.kind AND j.flow_key = k.key
WHERE j.flow_key IS NOT NULL
  AND j.state IN ('queued', 'leased', 'running', 'waiting', 'retrying', 'stalled')
ORDER BY j.created_at, j.id;

-- name: used_idempotency_keys
SELECT idempotency_key FROM jobs
WHERE tenant = %(tenant)s AND idempotency_key = ANY(%(idempotency_keys)s::text[]);

-- name: note_cancel_asked
-- A running job a newer one replaces: its cancel is asked (request_cancel), and its
-- events say by whom.
INSERT INTO job_events (job_id, from_state, to_state, attempt, detail)
SELECT id, state, state, attempt, %(detail)s FROM jobs WHERE id = %(id)s;
