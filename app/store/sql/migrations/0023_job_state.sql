-- State a job publishes (ctx.set_state, GET /v1/jobs/{id}/state): small JSON values under
-- keys, the latest one per key. The table is published_state: job_state names the type
-- of jobs.state. Written fenced by the lease, like every worker write
-- (app/store/sql/queries/state.sql); a change also appends a job_output row of type
-- 'state' in the same statement, so the job's stream (and its NOTIFY) carries it.
--
-- version counts the key's changes (1 for its first value); a write of the value the key
-- already holds changes nothing (a replay publishing what an earlier attempt published).
-- The bounds (app/settings/bounds.py) are checked here too; keys per job is checked by the
-- writing statement.
CREATE TABLE published_state (
    job_id      uuid        NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    key         text        NOT NULL CHECK (length(key) BETWEEN 1 AND 200),
    value       jsonb       NOT NULL CHECK (octet_length(value::text) <= 65536),
    version     bigint      NOT NULL CHECK (version >= 1),
    attempt     integer     NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (job_id, key)
);

ALTER TABLE job_output DROP CONSTRAINT job_output_type_check;
ALTER TABLE job_output ADD CONSTRAINT job_output_type_check
    CHECK (type IN ('progress', 'output', 'chunk', 'state'));
