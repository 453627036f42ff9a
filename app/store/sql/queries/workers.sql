-- Workers and Lambda environments (migration 0026): their rows written by the workers
-- themselves, read by GET /v1/workers. Named queries of app/store/workers.py.

-- name: worker_beat
-- A process's registration and each heartbeat: one UPSERT, last_seen from the database's
-- clock (the status is read against the same clock).
INSERT INTO workers AS w (id, name, runtime, host, pid, carrier, version, running)
VALUES (%(id)s, %(name)s, 'process', %(host)s, %(pid)s, %(carrier)s, %(version)s, %(running)s)
ON CONFLICT (id) DO UPDATE SET last_seen = now(), running = EXCLUDED.running
RETURNING w.started_at, w.last_seen;

-- name: worker_stopped
-- A clean stop: no job runs here any more.
UPDATE workers SET stopped_at = now(), last_seen = now(), running = 0
WHERE id = %(id)s;

-- name: lambda_invoked
-- One Lambda invocation: its environment's row made or counted on.
INSERT INTO workers AS w (id, name, runtime, host, pid, carrier, version, invocations, messages)
VALUES (%(id)s, %(name)s, 'lambda', %(host)s, %(pid)s, %(carrier)s, %(version)s, 1, %(messages)s)
ON CONFLICT (id) DO UPDATE SET last_seen = now(),
    invocations = w.invocations + 1,
    messages = w.messages + EXCLUDED.messages,
    version = EXCLUDED.version;

-- name: list_workers
-- The most recently seen first. A process is stopped (it said so), gone (silent for
-- longer than the bound) or alive; a Lambda environment is alive (invoked within the
-- bound) or idle.
SELECT id, name, runtime, host, pid, carrier, version, started_at, last_seen, running,
       invocations, messages, stopped_at,
       CASE
           WHEN stopped_at IS NOT NULL THEN 'stopped'
           WHEN last_seen >= now() - make_interval(secs => %(gone)s) THEN 'alive'
           WHEN runtime = 'lambda' THEN 'idle'
           ELSE 'gone'
       END AS status,
       extract(epoch FROM now() - last_seen)::float8 AS seen_ago
FROM workers
ORDER BY last_seen DESC, id
LIMIT %(limit)s;

-- name: prune_workers
-- Rows not seen for longer than the retention: a batch, oldest first.
WITH old AS (
    SELECT id FROM workers
    WHERE last_seen < now() - make_interval(secs => %(keep)s)
    ORDER BY last_seen
    LIMIT %(limit)s
)
DELETE FROM workers w USING old WHERE w.id = old.id
RETURNING 1;
