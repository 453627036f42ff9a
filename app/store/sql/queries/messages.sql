-- Messages to a job (docs/explain/design.md#messages): sending one, waking the job
-- waiting on its topic, consuming one as a receive's step.
-- Named queries of app/store/messages.py. Each starts with "-- name: NAME"; app/store/sql
-- loads every file of this folder. Parameters are always bound (%(name)s), never
-- formatted into the text.

-- name: lock_job_for_message
-- First in the sending transaction: the job's row (the one lock a suspending job also
-- takes, so the message and the suspension see each other), in the caller's scope, with
-- how many messages it has.
SELECT j.id, j.state::text AS state,
       (SELECT count(*) FROM job_messages m WHERE m.job_id = j.id) AS messages
FROM jobs j
WHERE j.id = %(id)s AND (%(scope)s::text IS NULL OR j.tenant = %(scope)s)
FOR UPDATE OF j;

-- name: message_by_key
SELECT * FROM job_messages WHERE job_id = %(id)s AND idempotency_key = %(key)s;

-- name: insert_message
-- After lock_job_for_message: the message, and the job waiting on its topic woken in
-- the same transaction.
WITH made AS (
    INSERT INTO job_messages (job_id, topic, body, idempotency_key, request_hash)
    VALUES (%(id)s, %(topic)s, %(body)s, %(key)s, %(request_hash)s)
    RETURNING *
)
SELECT made.*,
       coalesce((SELECT wake_job(j.id, 'message on ' || made.topic)
                 FROM jobs j
                 WHERE j.id = made.job_id AND j.state = 'waiting' AND j.wait_kind = 'message'
                   AND j.wait_key = made.topic), false) AS woken
FROM made;

-- name: take_message
-- Fenced by the lease: the message this receive (its effect key) consumed already, else
-- the oldest unread one of the topic, marked consumed by it. held is false when the lease
-- moved on (nothing is taken then).
WITH job AS (
    SELECT id FROM jobs
    WHERE id = %(id)s AND lease_token = %(token)s AND state = 'running'
    FOR NO KEY UPDATE
), mine AS (
    SELECT m.* FROM job_messages m JOIN job ON m.job_id = job.id
    WHERE m.consumed_by = %(key)s
), next AS (
    SELECT m.id FROM job_messages m JOIN job ON m.job_id = job.id
    WHERE m.topic = %(topic)s AND m.consumed_at IS NULL AND NOT EXISTS (SELECT 1 FROM mine)
    ORDER BY m.id LIMIT 1
    FOR UPDATE OF m
), took AS (
    UPDATE job_messages m SET consumed_at = now(), consumed_by = %(key)s
    FROM next WHERE m.id = next.id
    RETURNING m.*
), got AS (
    SELECT * FROM mine UNION ALL SELECT * FROM took
)
SELECT EXISTS (SELECT 1 FROM job) AS held, got.*
FROM (SELECT 1) one LEFT JOIN got ON true;

-- name: messages_of_job
-- A job's messages, oldest first (the API, `jobs show`, the web view).
SELECT * FROM job_messages WHERE job_id = %(id)s ORDER BY id LIMIT %(limit)s;
