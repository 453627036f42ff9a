-- Re-run and fork (issue 33, docs/explain/design.md#re-run-and-fork).
--
-- A re-run is a new job with the payload of a finished one (or an edited payload):
-- rerun_of names the job it re-runs. A fork is a new job that inherits the effects its
-- original recorded before a named step (fork_step) and runs from there, or every effect
-- it recorded (fork_step NULL: from the step after its last recorded one, the step that
-- failed): forked_from names the original. No foreign keys: a prune of the original leaves the new job whole
-- and the link as a record of where it came from (the original then reads as gone).
-- Plain ADD COLUMN without a default rewrites nothing; the checks are NOT VALID, so they
-- hold for every row written from now on without a scan of jobs under the lock (every
-- existing row has NULLs there, which pass them).
ALTER TABLE jobs ADD COLUMN rerun_of uuid;
ALTER TABLE jobs ADD COLUMN forked_from uuid;
ALTER TABLE jobs ADD COLUMN fork_step text;
ALTER TABLE jobs ADD CONSTRAINT jobs_fork_step_length
    CHECK (length(fork_step) BETWEEN 1 AND 200) NOT VALID;
ALTER TABLE jobs ADD CONSTRAINT jobs_fork_step_with_fork
    CHECK (fork_step IS NULL OR forked_from IS NOT NULL) NOT VALID;

-- An effect a fork inherited: copied (never shared by reference) into the new job in the
-- statement that creates it, and marked with the job it was recorded by. Its attempt,
-- worker and recorded_at are the original's; it counts in neither the job's usage nor the
-- tenant's (the original paid for it).
ALTER TABLE effects ADD COLUMN inherited_from uuid;

-- A job's page lists the jobs re-run or forked from it: only those rows are indexed.
-- Built CONCURRENTLY, outside the transaction (docs/howto/migrations.md): jobs takes
-- writes while they build.
-- tasklease: no-transaction
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_rerun_of ON jobs (rerun_of, created_at)
    WHERE rerun_of IS NOT NULL;
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_forked_from ON jobs (forked_from, created_at)
    WHERE forked_from IS NOT NULL;
