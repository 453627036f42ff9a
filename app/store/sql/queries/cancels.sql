-- Cancels of running jobs: which of a worker's attempts were asked to stop.
-- Named queries of app/store/cancels.py. Each starts with "-- name: NAME"; app/store/sql
-- loads every file of this folder. Parameters are always bound (%(name)s), never
-- formatted into the text.

-- name: cancels_requested
-- Of these (job, lease token) pairs, the jobs still held under that token whose cancel
-- was asked for: a notification's check (it is only a cue), the check after a LISTEN
-- connection came back (what was sent while it was down is gone), and an effect's
-- refused record (cancelled, or the lease lost).
SELECT j.id
FROM jobs j
JOIN unnest(%(ids)s::uuid[], %(tokens)s::uuid[]) AS r(id, token)
  ON j.id = r.id AND j.lease_token = r.token
WHERE j.cancel_requested AND j.state IN ('leased', 'running');
