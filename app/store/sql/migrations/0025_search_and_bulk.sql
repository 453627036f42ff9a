-- Search and bulk actions (issue 33).
--
-- A bulk action (POST /v1/bulk): cancel or redrive every job a filter matches, in
-- batches. Each batch's actions, the cursor (the last job id it looked at: the batches
-- walk the matching jobs by id) and the counts commit in one transaction, so a run
-- killed between batches resumes after the cursor and never acts on a job twice.
-- Jobs created after the operation are never matched (created_at <= created_at).
-- A runner holds the row by a lease (lease_token, lease_expires_at), renewed by each
-- batch; the sweeper (or the API at its next start) takes over one whose lease expired.
CREATE TABLE bulk_operations (
    id                uuid        PRIMARY KEY,
    -- The tenant whose jobs it acts on; NULL: every tenant's (an admin key).
    tenant            text,
    action            text        NOT NULL CHECK (action IN ('cancel', 'redrive', 'rerun')),
    filter            jsonb       NOT NULL,
    caller            text        NOT NULL,
    state             text        NOT NULL DEFAULT 'running'
                                  CHECK (state IN ('running', 'done', 'failed')),
    total             integer     NOT NULL CHECK (total >= 0),
    done              integer     NOT NULL DEFAULT 0 CHECK (done >= 0),
    skipped           integer     NOT NULL DEFAULT 0 CHECK (skipped >= 0),
    failed            integer     NOT NULL DEFAULT 0 CHECK (failed >= 0),
    batches           integer     NOT NULL DEFAULT 0 CHECK (batches >= 0),
    cursor            uuid,
    last_error        text,
    lease_token       uuid,
    lease_expires_at  timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    finished_at       timestamptz
);

-- Indexes of a table made in this transaction are built in it: the table is empty and
-- nobody else sees it yet.
CREATE INDEX bulk_operations_unfinished ON bulk_operations (lease_expires_at)
    WHERE state = 'running';
CREATE INDEX bulk_operations_tenant ON bulk_operations (tenant, created_at DESC);

-- Search by a payload field (GET /v1/jobs?payload.user_id=u-42): a containment test
-- (payload @> '{"user_id": "u-42"}') that this index answers at any size. jsonb_path_ops
-- indexes only containment, smaller and faster than the default operator class. Built
-- CONCURRENTLY, outside the transaction (docs/howto/migrations.md): jobs takes writes
-- while it builds.
-- (A search by id prefix is a range of the primary key; by idempotency key, the
-- jobs_idempotency unique index; by kind, state and time, the indexes of 0001 and 0019.)
-- tasklease: no-transaction
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_payload_path ON jobs USING gin (payload jsonb_path_ops);
