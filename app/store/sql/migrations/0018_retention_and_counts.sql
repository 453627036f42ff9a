-- A year of jobs (issue 18): retention, and counts by state that cost the same at any size.

-- Counts by tenant, kind and state, maintained as the rows change (GET /metrics and the
-- web view's overview read these, not a scan of jobs). Every statement that inserts,
-- deletes or changes the state of jobs appends its net change here, one row per
-- (tenant, kind, state) it moved: appended, never updated, so concurrent transactions
-- never wait on a counter row. The sweeper (and a metrics scrape) folds the appended
-- rows into job_counts; readers add what is not folded yet.
CREATE TABLE job_count_deltas (
    tenant  text      NOT NULL,
    kind    text      NOT NULL,
    state   job_state NOT NULL,
    n       bigint    NOT NULL
);

CREATE TABLE job_counts (
    tenant  text      NOT NULL,
    kind    text      NOT NULL,
    state   job_state NOT NULL,
    n       bigint    NOT NULL,
    PRIMARY KEY (tenant, kind, state)
);

-- Statement-level, with transition tables: one aggregate per statement, whatever its
-- size (a batch claim, a prune batch). A statement that changes no state (a heartbeat)
-- appends nothing.
CREATE FUNCTION count_jobs_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_count_deltas (tenant, kind, state, n)
    SELECT tenant, kind, state, count(*) FROM new_rows GROUP BY tenant, kind, state;
    RETURN NULL;
END
$$;

CREATE FUNCTION count_jobs_updated() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_count_deltas (tenant, kind, state, n)
    SELECT tenant, kind, state, sum(n) FROM (
        SELECT tenant, kind, state, 1 AS n FROM new_rows
        UNION ALL
        SELECT tenant, kind, state, -1 FROM old_rows
    ) AS moved
    GROUP BY tenant, kind, state
    HAVING sum(n) <> 0;
    RETURN NULL;
END
$$;

CREATE FUNCTION count_jobs_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_count_deltas (tenant, kind, state, n)
    SELECT tenant, kind, state, -count(*) FROM old_rows GROUP BY tenant, kind, state;
    RETURN NULL;
END
$$;

-- TRUNCATE fires no row or statement DELETE trigger: it empties the counts too.
CREATE FUNCTION count_jobs_truncated() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM job_count_deltas;
    DELETE FROM job_counts;
    RETURN NULL;
END
$$;

-- Creating the triggers locks jobs against writes until this migration commits, so the
-- count below and the triggers' rows never overlap or leave a gap.
CREATE TRIGGER jobs_count_inserted AFTER INSERT ON jobs
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION count_jobs_inserted();
CREATE TRIGGER jobs_count_updated AFTER UPDATE ON jobs
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION count_jobs_updated();
CREATE TRIGGER jobs_count_deleted AFTER DELETE ON jobs
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION count_jobs_deleted();
CREATE TRIGGER jobs_count_truncated AFTER TRUNCATE ON jobs
    FOR EACH STATEMENT EXECUTE FUNCTION count_jobs_truncated();

-- The jobs there already: one scan, once, at the upgrade.
INSERT INTO job_counts (tenant, kind, state, n)
SELECT tenant, kind, state, count(*) FROM jobs GROUP BY tenant, kind, state;

-- Retention: the prune finds a state's oldest finished jobs from this index, and deletes
-- them with their rows in the other tables. A job's outbox rows are found by job id
-- (the cascade: without this index every deleted job would scan the outbox).
CREATE INDEX jobs_finished ON jobs (state, finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX outbox_job ON outbox (job_id);
-- jobs_finished covers what jobs_dead_lettered (0004) served: the sweeper's count of
-- dead letters within the DLQ's retention.
DROP INDEX jobs_dead_lettered;
