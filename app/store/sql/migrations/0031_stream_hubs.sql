-- Stream wake-ups only while someone follows (issue 37). Every insert into job_events
-- and job_output notified the stream channel, and PostgreSQL serializes the commits of
-- notifying transactions (each takes the notify queue's lock until it has committed):
-- under load, every transition paid for a wake-up nobody waited for. Now an API process
-- whose stream hub has readers keeps a row here, its "until" moved on while they read,
-- and the triggers notify only while some hub's row is current. A reader never misses
-- a row for it: a wake-up only says "read again", and readers read again on their own
-- every few seconds (app/services/streams.py).
--
-- Expand only: a new table, and the trigger function replaced in place. Code from
-- before this migration keeps working; its hubs keep no row here, so during a rolling
-- deploy their readers are woken by the new code's hubs' rows, or by their own polls.
CREATE TABLE stream_hubs (
    hub   uuid        PRIMARY KEY,
    until timestamptz NOT NULL
);

CREATE OR REPLACE FUNCTION notify_stream() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM stream_hubs WHERE until > now()) THEN
        PERFORM pg_notify('tasklease_stream', NEW.job_id::text);
    END IF;
    RETURN NULL;
END;
$$;
