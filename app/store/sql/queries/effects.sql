-- A job's side effects, each recorded once.
-- Named queries of app/store/effects.py. Each starts with "-- name: NAME"; app/store/sql
-- loads every file of this folder. Parameters are always bound (%(name)s), never
-- formatted into the text.

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
RETURNING *;

-- name: get_effect
SELECT * FROM effects WHERE job_id = %(id)s AND key = %(key)s;

-- name: job_effects
SELECT * FROM effects WHERE job_id = %(id)s ORDER BY seq;
