-- The sweeper's marks: rows the sweepers of a deployment (EventBridge's, `tasklease
-- sweep` on several machines) coordinate through.
--
-- 'dlq_scan': when a sweeper last looked into the dead-letter queue (one sweeper per
-- TASKLEASE_DLQ_SCAN_INTERVAL_SECONDS claims it) and how many messages that look left
-- in the DLQ that no dead-lettered job accounts for (not ours, copies), so that they do
-- not make the next sweeps look again.
CREATE TABLE sweeper_marks (
    name        text        PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT '-infinity',
    unaccounted integer     NOT NULL DEFAULT 0 CHECK (unaccounted >= 0)
);

INSERT INTO sweeper_marks (name) VALUES ('dlq_scan');
-- 'dlq_full_look': the rare look at a DLQ whose messages the database seems to account
-- for (the count can run high: a dead letter purged by hand), first due one period after
-- this migration.
INSERT INTO sweeper_marks (name, at) VALUES ('dlq_full_look', now());

-- The sweeper counts dead-lettered jobs every sweep (one dead letter each).
CREATE INDEX jobs_dead_lettered ON jobs (finished_at) WHERE state = 'dead_lettered';
