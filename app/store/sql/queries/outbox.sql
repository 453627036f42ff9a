-- The outbox: messages written with their job, sent after commit.
-- Named queries of app/store/outbox.py. Each starts with "-- name: NAME"; app/store/sql
-- loads every file of this folder. Parameters are always bound (%(name)s), never
-- formatted into the text.

-- name: mark_outbox_sent
UPDATE outbox SET sent_at = now(), send_attempts = send_attempts + 1
WHERE id = ANY(%(ids)s) AND sent_at IS NULL;

-- name: note_outbox_failure
UPDATE outbox SET send_attempts = send_attempts + 1, last_error = %(error)s
WHERE id = ANY(%(ids)s);

-- name: take_unsent_outbox
-- Rows the fast path did not send; SKIP LOCKED lets several relays share the work.
-- The job's trace context rides on the message it sends; its tenant and priority say
-- where the message goes (the priority's queue, the tenant's message group).
SELECT o.id, o.job_id, j.trace_context, j.tenant, j.priority
FROM outbox o LEFT JOIN jobs j ON j.id = o.job_id
WHERE o.sent_at IS NULL AND o.created_at < now() - make_interval(secs => %(grace)s)
ORDER BY o.created_at
LIMIT %(limit)s
FOR UPDATE OF o SKIP LOCKED;
