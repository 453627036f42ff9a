-- A deadline for the whole run (issue 32): past it, whatever the job is doing, it ends
-- dead-lettered with the reason "deadline passed" (dead_lettered_by 'deadline'), its
-- children cancelled (the flag cancel_requested is set with it, so the trigger
-- jobs_cancel_children of migration 0007 cancels them in the same statement).
-- See docs/explain/design.md#deadlines.

-- NULL: no deadline. Written once at submit (the request's, else the kind's default).
ALTER TABLE jobs ADD COLUMN deadline timestamptz;

-- Who dead-lettered the job: 'engine', 'sweeper', or now 'deadline' (the run's deadline
-- passed; a worker or the sweeper enforced it, its events say which). No DLQ message
-- is sent for it: the DLQ's accounting (sweeper_marks.sql) leaves it out.
ALTER TABLE jobs DROP CONSTRAINT jobs_dead_lettered_by_check;
ALTER TABLE jobs ADD CONSTRAINT jobs_dead_lettered_by_check
    CHECK (dead_lettered_by IN ('engine', 'sweeper', 'deadline'));

-- The sweeper's pass: unfinished jobs with a deadline, by deadline, so it reads only
-- the ones past it.
CREATE INDEX jobs_deadline ON jobs (deadline)
    WHERE deadline IS NOT NULL
      AND state IN ('queued', 'leased', 'running', 'retrying', 'stalled', 'waiting');
