-- Bulk operations (migration 0025): their rows, their lease, their progress.
-- Named queries of app/store/bulk.py. Each starts with "-- name: NAME"; app/store/sql
-- loads every file of this folder. Parameters are always bound (%(name)s), never
-- formatted into the text.

-- name: bulk_create
-- A new operation, held by its creator's lease.
INSERT INTO bulk_operations (id, tenant, action, filter, caller, total, lease_token,
                             lease_expires_at)
VALUES (%(id)s, %(tenant)s, %(action)s, %(filter)s, %(caller)s, %(total)s, %(token)s,
        now() + make_interval(secs => %(lease_seconds)s))
RETURNING *;

-- name: bulk_get
SELECT * FROM bulk_operations
WHERE id = %(id)s AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text);

-- name: bulk_list
SELECT * FROM bulk_operations
WHERE (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)
ORDER BY created_at DESC LIMIT %(limit)s;

-- name: bulk_take_over
-- Unfinished operations whose runner's lease expired (it died): held by a new token.
UPDATE bulk_operations b
SET lease_token = %(token)s, lease_expires_at = now() + make_interval(secs => %(lease_seconds)s),
    updated_at = now()
FROM (SELECT id FROM bulk_operations
      WHERE state = 'running' AND lease_expires_at < now()
      ORDER BY lease_expires_at LIMIT %(limit)s
      FOR UPDATE SKIP LOCKED) t
WHERE b.id = t.id
RETURNING b.*;

-- name: bulk_hold
-- Inside a batch's transaction: the operation, locked, if this runner still holds it
-- (no row: another took over, or it finished); the lease renewed.
UPDATE bulk_operations
SET lease_expires_at = now() + make_interval(secs => %(lease_seconds)s), updated_at = now()
WHERE id = %(id)s AND lease_token = %(token)s AND state = 'running'
RETURNING *;

-- name: bulk_advance
-- Inside the batch's transaction: the cursor past the batch, the counts added.
UPDATE bulk_operations
SET cursor = %(cursor)s, done = done + %(done)s, skipped = skipped + %(skipped)s,
    failed = failed + %(failed)s, batches = batches + 1, updated_at = now()
WHERE id = %(id)s AND lease_token = %(token)s
RETURNING *;

-- name: bulk_finish
-- The last batch found no job: done (or failed, with why).
UPDATE bulk_operations
SET state = %(state)s, last_error = %(error)s, finished_at = now(), updated_at = now(),
    lease_token = NULL, lease_expires_at = NULL
WHERE id = %(id)s AND lease_token = %(token)s AND state = 'running'
RETURNING *;

-- name: bulk_prune
-- Finished operations past the retention: a batch, oldest first (a running one is kept
-- however old: the sweeper still resumes it). The table holds one row per POST /v1/bulk,
-- so the scan is of a small table.
WITH old AS (
    SELECT id FROM bulk_operations
    WHERE state <> 'running' AND finished_at < now() - make_interval(secs => %(keep)s)
    ORDER BY finished_at
    LIMIT %(limit)s
)
DELETE FROM bulk_operations b USING old WHERE b.id = old.id
RETURNING 1;
