-- tasklease initial schema. Forward-only: never edit an applied migration, add a new file.

CREATE TYPE job_state AS ENUM (
    'queued', 'leased', 'running', 'retrying', 'stalled',
    'succeeded', 'dead_lettered', 'cancelled'
);

CREATE TABLE jobs (
    id                 uuid PRIMARY KEY,
    tenant             text        NOT NULL DEFAULT 'default',
    kind               text        NOT NULL,
    payload            jsonb       NOT NULL,
    state              job_state   NOT NULL DEFAULT 'queued',
    attempt            integer     NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    max_attempts       integer     NOT NULL CHECK (max_attempts BETWEEN 1 AND 100),
    timeout_seconds    integer     NOT NULL CHECK (timeout_seconds BETWEEN 1 AND 43200),
    idempotency_key    text,
    request_hash       text        NOT NULL,
    result             jsonb,
    last_error         text,
    lease_owner        text,
    lease_token        uuid,
    lease_expires_at   timestamptz,
    cancel_requested   boolean     NOT NULL DEFAULT false,
    -- Who dead-lettered the job: 'engine' (it sent a new message to the DLQ) or
    -- 'sweeper' (SQS moved the message itself by the redrive policy).
    dead_lettered_by   text        CHECK (dead_lettered_by IN ('engine', 'sweeper')),
    redrives           integer     NOT NULL DEFAULT 0,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    started_at         timestamptz,
    finished_at        timestamptz,
    CONSTRAINT jobs_idempotency UNIQUE (tenant, idempotency_key),
    CONSTRAINT jobs_live_lease_has_token CHECK (
        state NOT IN ('leased', 'running') OR (lease_token IS NOT NULL AND lease_expires_at IS NOT NULL)
    )
);

CREATE INDEX jobs_state_kind ON jobs (state, kind, created_at, id);
CREATE INDEX jobs_created ON jobs (created_at DESC, id DESC);
CREATE INDEX jobs_expiring ON jobs (lease_expires_at) WHERE state IN ('leased', 'running');

-- The timeline of every transition; the API shows it.
CREATE TABLE job_events (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id      uuid        NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    from_state  job_state,
    to_state    job_state   NOT NULL,
    attempt     integer     NOT NULL,
    worker      text,
    detail      text
);

CREATE INDEX job_events_job ON job_events (job_id, id);

-- A job's side effects, each recorded once: the primary key is the conditional insert.
CREATE TABLE effects (
    job_id       uuid        NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    key          text        NOT NULL CHECK (length(key) BETWEEN 1 AND 200),
    seq          integer     NOT NULL,
    result       jsonb       NOT NULL,
    attempt      integer     NOT NULL,
    worker       text,
    recorded_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (job_id, key)
);

-- Messages still to be sent: written in the job's transaction, sent after commit.
CREATE TABLE outbox (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id         uuid        NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    created_at     timestamptz NOT NULL DEFAULT now(),
    sent_at        timestamptz,
    send_attempts  integer     NOT NULL DEFAULT 0,
    last_error     text
);

CREATE INDEX outbox_unsent ON outbox (created_at) WHERE sent_at IS NULL;
