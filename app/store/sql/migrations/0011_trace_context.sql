-- One trace per job (OpenTelemetry): the W3C traceparent of the span that submitted the
-- job (the request's, or for a spawned child its parent's attempt's), so every attempt,
-- after a crash, a retry, a wait, the outbox relay or a redrive, is a span of that one
-- trace even when the message that wakes it carries no trace context. NULL: written
-- with tracing off, or before this migration (such a job's attempts start their own).
ALTER TABLE jobs ADD COLUMN trace_context text;
-- NOT VALID: every row there is has no trace context yet, so checking them would only
-- scan the table under the lock the column took; rows written from now on are checked.
ALTER TABLE jobs ADD CONSTRAINT jobs_trace_context_is_a_traceparent
    CHECK (length(trace_context) <= 256) NOT VALID;
