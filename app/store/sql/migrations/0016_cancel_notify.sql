-- Cancellation that reaches the call (issue 16): a job asked to stop under a live lease
-- (the API or CLI's cancel, a cancelled parent's trigger, the sweeper's cancel_orphans)
-- notifies 'tasklease_cancel' with its id, in the same transaction, so the worker
-- running it (each worker process LISTENs: app/worker/cancels.py) stops it at once
-- instead of at its next heartbeat. Only the flag's change from false to true on a
-- leased or running job notifies: nothing is sent while nobody cancels.
CREATE FUNCTION notify_cancel() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('tasklease_cancel', NEW.id::text);
    RETURN NULL;
END;
$$;

CREATE TRIGGER jobs_notify_cancel
AFTER UPDATE OF cancel_requested ON jobs
FOR EACH ROW
WHEN (NEW.cancel_requested AND NOT OLD.cancel_requested
      AND NEW.state IN ('leased', 'running'))
EXECUTE FUNCTION notify_cancel();
