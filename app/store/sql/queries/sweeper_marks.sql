-- The sweeper's marks: what the database knows of the dead-letter queue, and the claim
-- that lets one sweeper at a time (at most every so often) look into it.
-- Named queries of app/store/sweeper_marks.py. Each starts with "-- name: NAME"; app/store/sql
-- loads every file of this folder. Parameters are always bound (%(name)s), never
-- formatted into the text.

-- name: dlq_accounted
-- The DLQ messages the database accounts for, given the queue's depth: one per job
-- dead-lettered within the DLQ's retention, plus what the last scan left that no such
-- job explains. That remainder is lowered to what the depth leaves room for (written
-- only when it drops), so a message deleted by hand does not hide a new one for long.
-- A job whose redriven message was refused past its redrive budget has no dead letter
-- left (the claim deleted it): not counted.
WITH dead AS (
    SELECT count(*) AS n FROM jobs
    WHERE state = 'dead_lettered'
      AND finished_at > now() - make_interval(secs => %(retention)s)
      AND NOT starts_with(coalesce(last_error, ''), 'redrive budget used up')
      -- Ended by its deadline (migration 0022): no dead letter was sent for it.
      AND dead_lettered_by IS DISTINCT FROM 'deadline'
), lowered AS (
    UPDATE sweeper_marks m SET unaccounted = greatest(0, %(depth)s - dead.n)
    FROM dead
    WHERE m.name = 'dlq_scan' AND m.unaccounted > greatest(0, %(depth)s - dead.n)
    RETURNING m.unaccounted
)
SELECT dead.n + coalesce((SELECT unaccounted FROM lowered),
                         (SELECT unaccounted FROM sweeper_marks WHERE name = 'dlq_scan'),
                         0) AS accounted
FROM dead;

-- name: claim_dlq_scan
-- The right to look into the DLQ now: granted to one caller per `every` seconds, by the
-- mark `mark` ('dlq_scan': a look for messages the database does not account for;
-- 'dlq_full_look': the rare look at a DLQ the database seems to account for).
UPDATE sweeper_marks SET at = now()
WHERE name = %(mark)s AND at <= now() - make_interval(secs => %(every)s)
RETURNING at;

-- name: give_back_dlq_scan
-- A claimed scan that did not happen (a move task runs): the next sweep may claim it.
UPDATE sweeper_marks SET at = '-infinity' WHERE name = %(mark)s AND at = %(at)s;

-- name: dlq_scanned
-- What a scan left in the DLQ that no dead-lettered job accounts for.
UPDATE sweeper_marks SET unaccounted = %(unaccounted)s WHERE name = 'dlq_scan';
