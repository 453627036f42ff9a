-- Workers (issue 33): who runs the jobs. A long-running worker process (`tasklease worker`,
-- the local stack's workers) writes its row when it starts, refreshes last_seen and running
-- every TASKLEASE_WORKER_HEARTBEAT_SECONDS (one UPSERT, never one per job), and sets
-- stopped_at on a clean stop; a row whose last_seen is older than
-- TASKLEASE_WORKER_GONE_SECONDS is shown as gone (a kill leaves no trace but silence).
-- On Lambda there is no long-lived process: each execution environment (its log stream)
-- has one row, and each invocation adds one to invocations and its batch to messages.
-- Rows past TASKLEASE_RETAIN_WORKERS_SECONDS are deleted by the prune (retention).
CREATE TABLE workers (
    id           text        PRIMARY KEY,  -- a process: a uuid per start; Lambda: lambda:FUNCTION:LOG_STREAM
    name         text        NOT NULL,     -- the lease owner (TASKLEASE_WORKER_ID), or the function
    runtime      text        NOT NULL CHECK (runtime IN ('process', 'lambda')),
    host         text        NOT NULL,
    pid          integer     NOT NULL,
    carrier      text        NOT NULL,     -- sqs or redis
    version      text        NOT NULL,     -- tasklease's
    started_at   timestamptz NOT NULL DEFAULT now(),
    last_seen    timestamptz NOT NULL DEFAULT now(),
    running      integer     NOT NULL DEFAULT 0,  -- a process: jobs it runs now
    invocations  bigint      NOT NULL DEFAULT 0,  -- Lambda: invocations of this environment
    messages     bigint      NOT NULL DEFAULT 0,  -- Lambda: records those invocations carried
    stopped_at   timestamptz
);

-- The page lists the most recently seen first; the prune deletes the oldest.
CREATE INDEX workers_last_seen ON workers (last_seen);
