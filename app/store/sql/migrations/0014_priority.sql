-- Priorities (docs/explain/design.md#priorities): a job's priority picks the queue its messages go to
-- (high, normal, low; each with its own DLQ). A constant default: ADD COLUMN rewrites
-- nothing, and every job written before this migration is normal.
ALTER TABLE jobs ADD COLUMN priority text NOT NULL DEFAULT 'normal'
    CONSTRAINT jobs_priority_known CHECK (priority IN ('high', 'normal', 'low'));
