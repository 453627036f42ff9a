-- Streams (GET /v1/jobs/{id}/stream, GET /v1/stream): a job's progress and output beside
-- its transitions, both readable in commit order and resumable without gaps or repeats.
--
-- The order is (tx, id): the writing transaction's id, then the row's. A reader takes only
-- rows of transactions older than every transaction still running (tx below its
-- snapshot's xmin): a row that commits later always sorts after what was read, so a
-- cursor "(tx, id)" never skips one (an identity id alone would: ids are handed out in
-- insert order, not commit order). Rows written before this migration have no tx and
-- sort first.

ALTER TABLE job_events ADD COLUMN tx xid8;
ALTER TABLE job_events ALTER COLUMN tx SET DEFAULT pg_current_xact_id();
CREATE INDEX job_events_tx ON job_events (tx, id);

-- What a kind emits while it runs: ctx.progress (type progress), ctx.emit (output) and a
-- streamed model answer's chunks (chunk: the effect's key and the chunk's place in its
-- text, once each). The ids come from job_events' sequence: one order over both tables.
CREATE TABLE job_output (
    id       bigint      PRIMARY KEY DEFAULT nextval(pg_get_serial_sequence('job_events', 'id')::regclass),
    job_id   uuid        NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    tx       xid8        NOT NULL DEFAULT pg_current_xact_id(),
    at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    attempt  integer     NOT NULL,
    type     text        NOT NULL CHECK (type IN ('progress', 'output', 'chunk')),
    key      text,
    seq      integer,
    data     jsonb       NOT NULL,
    CONSTRAINT job_output_chunk_has_place CHECK ((type = 'chunk') = (key IS NOT NULL AND seq IS NOT NULL)),
    CONSTRAINT job_output_chunk_once UNIQUE (job_id, key, seq)
);

CREATE INDEX job_output_job ON job_output (job_id, tx, id);
CREATE INDEX job_output_tx ON job_output (tx, id);

-- Wake the readers: every API process LISTENs on one channel and reads the tables when
-- told. The payload is the job's id; PostgreSQL folds repeats within a transaction, so a
-- batch of output is one notification.
CREATE FUNCTION notify_stream() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('tasklease_stream', NEW.job_id::text);
    RETURN NULL;
END;
$$;

CREATE TRIGGER job_events_notify AFTER INSERT ON job_events
    FOR EACH ROW EXECUTE FUNCTION notify_stream();
CREATE TRIGGER job_output_notify AFTER INSERT ON job_output
    FOR EACH ROW EXECUTE FUNCTION notify_stream();
