-- State a job publishes (ctx.set_state, GET /v1/jobs/{id}/state; migration 0023).
-- Named queries of app/store/state.py. Each starts with "-- name: NAME"; app/store/sql
-- loads every file of this folder. Parameters are always bound (%(name)s), never
-- formatted into the text.

-- name: set_state
-- Fenced, as append_output: only the lease holder of a running job writes, and not once
-- the job's cancel was asked for. The key takes the value (its version one more) unless
-- it holds that value already (nothing changes: a replay publishing the same value);
-- a new key only while the job has fewer than max_keys. A change appends the stream's
-- 'state' row in the same statement. `version` is the key's version after the write.
WITH held AS (
    SELECT id, attempt, cancel_requested FROM jobs
    WHERE id = %(id)s AND lease_token = %(token)s AND state = 'running'
    FOR SHARE
), j AS (
    SELECT id, attempt FROM held WHERE NOT cancel_requested
), cur AS (
    SELECT version FROM published_state WHERE job_id = %(id)s AND key = %(key)s
), room AS (
    SELECT EXISTS (SELECT 1 FROM cur)
           OR (SELECT count(*) FROM published_state WHERE job_id = %(id)s) < %(max_keys)s AS ok
), up AS (
    INSERT INTO published_state AS s (job_id, key, value, version, attempt)
    SELECT j.id, %(key)s, %(value)s, 1, j.attempt FROM j, room WHERE room.ok
    ON CONFLICT (job_id, key) DO UPDATE
        SET value = EXCLUDED.value, version = s.version + 1, attempt = EXCLUDED.attempt,
            updated_at = clock_timestamp()
        WHERE s.value IS DISTINCT FROM EXCLUDED.value
    RETURNING s.job_id, s.key, s.value, s.version, s.attempt, s.updated_at
), ev AS (
    INSERT INTO job_output (job_id, attempt, at, type, key, data)
    SELECT job_id, attempt, updated_at, 'state', key,
           jsonb_build_object('key', key, 'value', value, 'version', version)
    FROM up
    RETURNING 1
)
SELECT (SELECT count(*) FROM j) = 1 AS fenced,
       (SELECT count(*) FROM held WHERE cancel_requested) = 1 AS cancelled,
       (SELECT ok FROM room) AS room,
       coalesce((SELECT version FROM up), (SELECT version FROM cur)) AS version,
       (SELECT count(*) FROM ev) = 1 AS changed;

-- name: state_of_job
-- Every key a job published, by key.
SELECT key, value, version, attempt, updated_at FROM published_state
WHERE job_id = %(job)s
ORDER BY key;

-- name: state_key
-- One key of a job and the job's state (no key: its columns are NULL; no job: no row).
SELECT j.state::text AS job_state, s.key, s.value, s.version, s.attempt, s.updated_at
FROM jobs j LEFT JOIN published_state s ON s.job_id = j.id AND s.key = %(key)s
WHERE j.id = %(job)s;
