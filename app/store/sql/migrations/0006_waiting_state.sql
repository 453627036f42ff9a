-- A job that waits holds no worker, no lease and no message in flight: a timer, a
-- callback from outside, or its child jobs. Its own migration: a new enum value can only
-- be used once the transaction that adds it has committed.
ALTER TYPE job_state ADD VALUE IF NOT EXISTS 'waiting' BEFORE 'succeeded';
