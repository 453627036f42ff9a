-- Schedules: create, read, list, pause, resume, delete, and the sweeper's take and advance.
-- Named queries of app/store/schedules.py. Each starts with "-- name: NAME"; app/store/sql
-- loads every file of this folder. Parameters are always bound (%(name)s), never
-- formatted into the text. A NULL tenant is the operator's view (an admin key, the CLI).

-- name: insert_schedule
-- A name the tenant already uses writes nothing (the caller answers 409).
INSERT INTO schedules (id, tenant, name, cron, timezone, kind, payload, max_attempts,
                       timeout_seconds, next_slot)
VALUES (%(id)s, %(tenant)s, %(name)s, %(cron)s, %(timezone)s, %(kind)s, %(payload)s,
        %(max_attempts)s, %(timeout_seconds)s, %(next_slot)s)
ON CONFLICT (tenant, name) DO NOTHING
RETURNING *;

-- name: get_schedule
SELECT * FROM schedules
WHERE id = %(id)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text);

-- name: list_schedules
-- Newest first.
SELECT * FROM schedules
WHERE (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)
ORDER BY created_at DESC, id DESC
LIMIT %(limit)s;

-- name: pause_schedule
UPDATE schedules SET enabled = false, updated_at = now()
WHERE id = %(id)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)
RETURNING *;

-- name: resume_schedule
-- A paused schedule starts again from the first slot after now (`next_slot`, computed by
-- the caller): the slots of the pause make no job. A schedule that is not paused keeps
-- its next slot, so a resume never skips a due slot the sweeper has not made yet.
UPDATE schedules
SET next_slot = CASE WHEN enabled THEN next_slot ELSE %(next_slot)s::timestamptz END,
    enabled = true,
    updated_at = now()
WHERE id = %(id)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)
RETURNING *;

-- name: delete_schedule
-- The jobs it made stay.
DELETE FROM schedules
WHERE id = %(id)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)
RETURNING id;

-- name: take_due_schedule
-- One enabled schedule whose next slot is due, locked for the caller's transaction, and
-- the database's clock (every sweeper reads the same one). SKIP LOCKED: a schedule
-- another sweeper holds is that sweeper's; once it commits, its next_slot is in the
-- future and the row no longer matches (PostgreSQL re-checks the WHERE on the row a
-- lock waits for, and SKIP LOCKED never waits). `skip`: schedules this sweep already
-- took already; `skip_tenants`: tenants over their limits this sweep (admission is
-- per tenant: their other schedules would be left due too).
SELECT s.*, now() AS db_now FROM schedules s
WHERE s.enabled AND s.next_slot <= now() AND s.id <> ALL(%(skip)s::uuid[])
  AND s.tenant <> ALL(%(skip_tenants)s::text[])
ORDER BY s.next_slot, s.id
LIMIT 1
FOR UPDATE SKIP LOCKED;

-- name: advance_schedule
-- After a due slot: the next slot after now (NULL: none left, and the schedule is
-- disabled), the slot made and its job (a slot that made no job keeps the last ones),
-- and why no job was made, if none was.
UPDATE schedules
SET next_slot = %(next_slot)s::timestamptz,
    enabled = enabled AND %(next_slot)s::timestamptz IS NOT NULL,
    last_slot = coalesce(%(slot)s::timestamptz, last_slot),
    last_job_id = coalesce(%(job_id)s::uuid, last_job_id),
    last_error = %(error)s,
    updated_at = now()
WHERE id = %(id)s;

-- name: note_schedule_error
-- A due slot left for the next sweep (the tenant over its limits): why, on the row.
UPDATE schedules SET last_error = %(error)s, updated_at = now() WHERE id = %(id)s;
