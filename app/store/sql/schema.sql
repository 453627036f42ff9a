-- The schema the migrations (app/store/sql/migrations/) leave in the public schema, read
-- from the catalog of a freshly migrated database. Written by `make schema`; do not edit:
-- tests/integration/test_schema_snapshot.py fails when it and the migrations disagree.

CREATE TYPE job_state AS ENUM ('queued', 'leased', 'running', 'retrying', 'stalled', 'waiting', 'succeeded', 'dead_lettered', 'cancelled');

CREATE SEQUENCE job_messages_id_seq AS bigint START 1 INCREMENT 1;

CREATE TABLE alert_conditions (
    name text NOT NULL,
    firing boolean DEFAULT false NOT NULL,
    crossings integer DEFAULT 0 NOT NULL,
    value double precision,
    changed_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT alert_conditions_pkey PRIMARY KEY (name)
);

CREATE TABLE alerts (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    dedup_key text NOT NULL,
    type text NOT NULL,
    tenant text,
    job_id uuid,
    detail jsonb DEFAULT '{}'::jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    delivered text[] DEFAULT '{}'::text[] NOT NULL,
    delivered_at timestamp with time zone,
    attempts integer DEFAULT 0 NOT NULL,
    next_attempt_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    last_error text,
    given_up_at timestamp with time zone,
    CONSTRAINT alerts_dedup_key_check CHECK (((length(dedup_key) >= 1) AND (length(dedup_key) <= 300))),
    CONSTRAINT alerts_dedup_key_key UNIQUE (dedup_key),
    CONSTRAINT alerts_pkey PRIMARY KEY (id),
    CONSTRAINT alerts_type_check CHECK ((type = ANY (ARRAY['job.dead_lettered'::text, 'job.stalled'::text, 'dlq.over_threshold'::text, 'queue.oldest_over_threshold'::text, 'tenant.budget_exhausted'::text])))
);

CREATE TABLE api_keys (
    id text NOT NULL,
    tenant text NOT NULL,
    name text DEFAULT ''::text NOT NULL,
    admin boolean DEFAULT false NOT NULL,
    salt bytea,
    secret_hash bytea NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    revoked_at timestamp with time zone,
    scheme text DEFAULT 'scrypt'::text NOT NULL,
    hash_secret_id text,
    CONSTRAINT api_keys_hash_secret_id_check CHECK ((hash_secret_id ~ '^[0-9a-f]{16}$'::text)),
    CONSTRAINT api_keys_id_check CHECK ((id ~ '^[0-9a-f]{12}$'::text)),
    CONSTRAINT api_keys_name_check CHECK ((length(name) <= 100)),
    CONSTRAINT api_keys_pkey PRIMARY KEY (id),
    CONSTRAINT api_keys_scheme_check CHECK ((scheme = ANY (ARRAY['scrypt'::text, 'hmac-sha256'::text]))),
    CONSTRAINT api_keys_scheme_fields CHECK ((((scheme = 'scrypt'::text) AND (salt IS NOT NULL) AND (hash_secret_id IS NULL)) OR ((scheme = 'hmac-sha256'::text) AND (salt IS NULL) AND (hash_secret_id IS NOT NULL)))),
    CONSTRAINT api_keys_tenant_check CHECK ((tenant ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$'::text))
);

CREATE TABLE bulk_operations (
    id uuid NOT NULL,
    tenant text,
    action text NOT NULL,
    filter jsonb NOT NULL,
    caller text NOT NULL,
    state text DEFAULT 'running'::text NOT NULL,
    total integer NOT NULL,
    done integer DEFAULT 0 NOT NULL,
    skipped integer DEFAULT 0 NOT NULL,
    failed integer DEFAULT 0 NOT NULL,
    batches integer DEFAULT 0 NOT NULL,
    cursor uuid,
    last_error text,
    lease_token uuid,
    lease_expires_at timestamp with time zone,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    finished_at timestamp with time zone,
    CONSTRAINT bulk_operations_action_check CHECK ((action = ANY (ARRAY['cancel'::text, 'redrive'::text, 'rerun'::text]))),
    CONSTRAINT bulk_operations_batches_check CHECK ((batches >= 0)),
    CONSTRAINT bulk_operations_done_check CHECK ((done >= 0)),
    CONSTRAINT bulk_operations_failed_check CHECK ((failed >= 0)),
    CONSTRAINT bulk_operations_pkey PRIMARY KEY (id),
    CONSTRAINT bulk_operations_skipped_check CHECK ((skipped >= 0)),
    CONSTRAINT bulk_operations_state_check CHECK ((state = ANY (ARRAY['running'::text, 'done'::text, 'failed'::text]))),
    CONSTRAINT bulk_operations_total_check CHECK ((total >= 0))
);

CREATE TABLE callbacks (
    token_hash bytea NOT NULL,
    job_id uuid NOT NULL,
    key text NOT NULL,
    state text DEFAULT 'pending'::text NOT NULL,
    timeout_seconds integer NOT NULL,
    deadline timestamp with time zone NOT NULL,
    result jsonb,
    error text,
    heartbeats integer DEFAULT 0 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    answered_at timestamp with time zone,
    details jsonb,
    CONSTRAINT callbacks_job_id_fkey FOREIGN KEY (job_id) REFERENCES jobs(id) ON DELETE CASCADE,
    CONSTRAINT callbacks_once_per_key UNIQUE (job_id, key),
    CONSTRAINT callbacks_pkey PRIMARY KEY (token_hash),
    CONSTRAINT callbacks_state_check CHECK ((state = ANY (ARRAY['pending'::text, 'succeeded'::text, 'failed'::text, 'timed_out'::text]))),
    CONSTRAINT callbacks_timeout_seconds_check CHECK ((timeout_seconds > 0))
);

CREATE TABLE chart_buckets (
    width integer NOT NULL,
    at timestamp with time zone NOT NULL,
    tenant text NOT NULL,
    kind text NOT NULL,
    series text NOT NULL,
    bucket smallint NOT NULL,
    n bigint NOT NULL,
    CONSTRAINT chart_buckets_pkey PRIMARY KEY (width, tenant, at, kind, series, bucket),
    CONSTRAINT chart_buckets_width_check CHECK ((width = ANY (ARRAY[60, 900, 3600])))
);

CREATE TABLE chart_deltas (
    at timestamp with time zone NOT NULL,
    tenant text NOT NULL,
    kind text NOT NULL,
    series text NOT NULL,
    bucket smallint NOT NULL,
    n bigint NOT NULL
);

CREATE TABLE effects (
    job_id uuid NOT NULL,
    key text NOT NULL,
    seq integer NOT NULL,
    result jsonb NOT NULL,
    attempt integer NOT NULL,
    worker text,
    recorded_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    model text,
    input_tokens integer,
    output_tokens integer,
    inherited_from uuid,
    shape text,
    CONSTRAINT effects_job_id_fkey FOREIGN KEY (job_id) REFERENCES jobs(id) ON DELETE CASCADE,
    CONSTRAINT effects_key_check CHECK (((length(key) >= 1) AND (length(key) <= 200))),
    CONSTRAINT effects_pkey PRIMARY KEY (job_id, key),
    CONSTRAINT effects_shape_length CHECK (((length(shape) >= 1) AND (length(shape) <= 300))) NOT VALID
);

CREATE TABLE job_count_deltas (
    tenant text NOT NULL,
    kind text NOT NULL,
    state job_state NOT NULL,
    n bigint NOT NULL
);

CREATE TABLE job_counts (
    tenant text NOT NULL,
    kind text NOT NULL,
    state job_state NOT NULL,
    n bigint NOT NULL,
    CONSTRAINT job_counts_pkey PRIMARY KEY (tenant, kind, state)
);

CREATE TABLE job_events (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    job_id uuid NOT NULL,
    at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    from_state job_state,
    to_state job_state NOT NULL,
    attempt integer NOT NULL,
    worker text,
    detail text,
    tx xid8 DEFAULT pg_current_xact_id(),
    CONSTRAINT job_events_job_id_fkey FOREIGN KEY (job_id) REFERENCES jobs(id) ON DELETE CASCADE,
    CONSTRAINT job_events_pkey PRIMARY KEY (id)
);

CREATE TABLE job_messages (
    id bigint DEFAULT nextval('job_messages_id_seq'::regclass) NOT NULL,
    job_id uuid NOT NULL,
    topic text NOT NULL,
    body jsonb NOT NULL,
    idempotency_key text,
    request_hash text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    consumed_at timestamp with time zone,
    consumed_by text,
    CONSTRAINT job_messages_consumed_once UNIQUE (job_id, consumed_by),
    CONSTRAINT job_messages_consumed_together CHECK (((consumed_at IS NULL) = (consumed_by IS NULL))),
    CONSTRAINT job_messages_idempotency_key_check CHECK (((char_length(idempotency_key) >= 1) AND (char_length(idempotency_key) <= 200))),
    CONSTRAINT job_messages_job_id_fkey FOREIGN KEY (job_id) REFERENCES jobs(id) ON DELETE CASCADE,
    CONSTRAINT job_messages_once_per_key UNIQUE (job_id, idempotency_key),
    CONSTRAINT job_messages_pkey PRIMARY KEY (id),
    CONSTRAINT job_messages_topic_check CHECK (((char_length(topic) >= 1) AND (char_length(topic) <= 100)))
);

CREATE TABLE job_output (
    id bigint DEFAULT nextval((pg_get_serial_sequence('job_events'::text, 'id'::text))::regclass) NOT NULL,
    job_id uuid NOT NULL,
    tx xid8 DEFAULT pg_current_xact_id() NOT NULL,
    at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    attempt integer NOT NULL,
    type text NOT NULL,
    key text,
    seq integer,
    data jsonb NOT NULL,
    CONSTRAINT job_output_chunk_has_place CHECK (((type = 'chunk'::text) = ((key IS NOT NULL) AND (seq IS NOT NULL)))),
    CONSTRAINT job_output_chunk_once UNIQUE (job_id, key, seq),
    CONSTRAINT job_output_job_id_fkey FOREIGN KEY (job_id) REFERENCES jobs(id) ON DELETE CASCADE,
    CONSTRAINT job_output_pkey PRIMARY KEY (id),
    CONSTRAINT job_output_type_check CHECK ((type = ANY (ARRAY['progress'::text, 'output'::text, 'chunk'::text, 'state'::text])))
);

CREATE TABLE jobs (
    id uuid NOT NULL,
    tenant text DEFAULT 'default'::text NOT NULL,
    kind text NOT NULL,
    payload jsonb NOT NULL,
    state job_state DEFAULT 'queued'::job_state NOT NULL,
    attempt integer DEFAULT 0 NOT NULL,
    max_attempts integer NOT NULL,
    timeout_seconds integer NOT NULL,
    idempotency_key text,
    request_hash text NOT NULL,
    result jsonb,
    last_error text,
    lease_owner text,
    lease_token uuid,
    lease_expires_at timestamp with time zone,
    cancel_requested boolean DEFAULT false NOT NULL,
    dead_lettered_by text,
    redrives integer DEFAULT 0 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    runs integer DEFAULT 0 NOT NULL,
    redriven_at timestamp with time zone[] DEFAULT '{}'::timestamp with time zone[] NOT NULL,
    parent_id uuid,
    spawn_key text,
    wait_kind text,
    wait_key text,
    wake_at timestamp with time zone,
    wait_rule jsonb,
    wake_sent_at timestamp with time zone,
    trace_context text,
    parked boolean DEFAULT false NOT NULL,
    priority text DEFAULT 'normal'::text NOT NULL,
    throttles integer DEFAULT 0 NOT NULL,
    deadline timestamp with time zone,
    rerun_of uuid,
    forked_from uuid,
    fork_step text,
    kind_version text,
    flow_key text,
    key_concurrency integer,
    key_rate integer,
    key_rate_seconds double precision,
    key_claimed_at timestamp with time zone,
    CONSTRAINT jobs_attempt_check CHECK ((attempt >= 0)),
    CONSTRAINT jobs_dead_lettered_by_check CHECK ((dead_lettered_by = ANY (ARRAY['engine'::text, 'sweeper'::text, 'deadline'::text]))),
    CONSTRAINT jobs_flow_key_length CHECK (((length(flow_key) >= 1) AND (length(flow_key) <= 200))) NOT VALID,
    CONSTRAINT jobs_fork_step_length CHECK (((length(fork_step) >= 1) AND (length(fork_step) <= 200))) NOT VALID,
    CONSTRAINT jobs_fork_step_with_fork CHECK (((fork_step IS NULL) OR (forked_from IS NOT NULL))) NOT VALID,
    CONSTRAINT jobs_idempotency UNIQUE (tenant, idempotency_key),
    CONSTRAINT jobs_key_concurrency_positive CHECK ((key_concurrency >= 1)) NOT VALID,
    CONSTRAINT jobs_key_rate_positive CHECK (((key_rate >= 1) AND (key_rate_seconds > (0)::double precision))) NOT VALID,
    CONSTRAINT jobs_kind_version_length CHECK (((length(kind_version) >= 1) AND (length(kind_version) <= 64))) NOT VALID,
    CONSTRAINT jobs_live_lease_has_token CHECK (((state <> ALL (ARRAY['leased'::job_state, 'running'::job_state])) OR ((lease_token IS NOT NULL) AND (lease_expires_at IS NOT NULL)))),
    CONSTRAINT jobs_max_attempts_check CHECK (((max_attempts >= 1) AND (max_attempts <= 100))),
    CONSTRAINT jobs_parent_id_fkey FOREIGN KEY (parent_id) REFERENCES jobs(id) ON DELETE SET NULL,
    CONSTRAINT jobs_pkey PRIMARY KEY (id),
    CONSTRAINT jobs_priority_known CHECK ((priority = ANY (ARRAY['high'::text, 'normal'::text, 'low'::text]))),
    CONSTRAINT jobs_runs_check CHECK ((runs >= 0)),
    CONSTRAINT jobs_spawned_once UNIQUE (parent_id, spawn_key),
    CONSTRAINT jobs_timeout_seconds_check CHECK (((timeout_seconds >= 1) AND (timeout_seconds <= 43200))),
    CONSTRAINT jobs_trace_context_is_a_traceparent CHECK ((length(trace_context) <= 256)) NOT VALID,
    CONSTRAINT jobs_wait_kind_check CHECK ((wait_kind = ANY (ARRAY['timer'::text, 'callback'::text, 'children'::text, 'message'::text]))),
    CONSTRAINT jobs_waiting_says_for_what CHECK (((state <> 'waiting'::job_state) OR (wait_kind IS NOT NULL)))
);

CREATE TABLE model_budget_minutes (
    model text NOT NULL,
    minute timestamp with time zone NOT NULL,
    requests integer DEFAULT 0 NOT NULL,
    tokens bigint DEFAULT 0 NOT NULL,
    CONSTRAINT model_budget_minutes_pkey PRIMARY KEY (model, minute),
    CONSTRAINT model_budget_minutes_requests_check CHECK ((requests >= 0)),
    CONSTRAINT model_budget_minutes_tokens_check CHECK ((tokens >= 0))
);

CREATE TABLE outbox (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    job_id uuid NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    sent_at timestamp with time zone,
    send_attempts integer DEFAULT 0 NOT NULL,
    last_error text,
    CONSTRAINT outbox_job_id_fkey FOREIGN KEY (job_id) REFERENCES jobs(id) ON DELETE CASCADE,
    CONSTRAINT outbox_pkey PRIMARY KEY (id)
);

CREATE TABLE published_state (
    job_id uuid NOT NULL,
    key text NOT NULL,
    value jsonb NOT NULL,
    version bigint NOT NULL,
    attempt integer NOT NULL,
    updated_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT published_state_job_id_fkey FOREIGN KEY (job_id) REFERENCES jobs(id) ON DELETE CASCADE,
    CONSTRAINT published_state_key_check CHECK (((length(key) >= 1) AND (length(key) <= 200))),
    CONSTRAINT published_state_pkey PRIMARY KEY (job_id, key),
    CONSTRAINT published_state_value_check CHECK ((octet_length((value)::text) <= 65536)),
    CONSTRAINT published_state_version_check CHECK ((version >= 1))
);

CREATE TABLE schedules (
    id uuid NOT NULL,
    tenant text NOT NULL,
    name text,
    cron text NOT NULL,
    timezone text NOT NULL,
    kind text NOT NULL,
    payload jsonb NOT NULL,
    max_attempts integer,
    timeout_seconds integer,
    enabled boolean DEFAULT true NOT NULL,
    next_slot timestamp with time zone,
    last_slot timestamp with time zone,
    last_job_id uuid,
    last_error text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT schedules_cron_check CHECK (((length(cron) >= 1) AND (length(cron) <= 100))),
    CONSTRAINT schedules_last_job_id_fkey FOREIGN KEY (last_job_id) REFERENCES jobs(id) ON DELETE SET NULL,
    CONSTRAINT schedules_max_attempts_check CHECK (((max_attempts >= 1) AND (max_attempts <= 100))),
    CONSTRAINT schedules_name UNIQUE (tenant, name),
    CONSTRAINT schedules_name_check CHECK (((length(name) >= 1) AND (length(name) <= 100))),
    CONSTRAINT schedules_pkey PRIMARY KEY (id),
    CONSTRAINT schedules_tenant_check CHECK ((tenant ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$'::text)),
    CONSTRAINT schedules_timeout_seconds_check CHECK (((timeout_seconds >= 1) AND (timeout_seconds <= 43200))),
    CONSTRAINT schedules_timezone_check CHECK (((length(timezone) >= 1) AND (length(timezone) <= 100)))
);

CREATE TABLE schema_migrations (
    version text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT schema_migrations_pkey PRIMARY KEY (version)
);

CREATE TABLE schema_migrations_online (
    version text NOT NULL,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT schema_migrations_online_pkey PRIMARY KEY (version)
);

CREATE TABLE server_secret (
    only_row boolean DEFAULT true NOT NULL,
    secret bytea NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT server_secret_only_row_check CHECK (only_row),
    CONSTRAINT server_secret_pkey PRIMARY KEY (only_row),
    CONSTRAINT server_secret_secret_check CHECK ((length(secret) >= 30))
);

CREATE TABLE stream_hubs (
    hub uuid NOT NULL,
    until timestamp with time zone NOT NULL,
    CONSTRAINT stream_hubs_pkey PRIMARY KEY (hub)
);

CREATE TABLE sweeper_marks (
    name text NOT NULL,
    at timestamp with time zone DEFAULT '-infinity'::timestamp with time zone NOT NULL,
    unaccounted integer DEFAULT 0 NOT NULL,
    CONSTRAINT sweeper_marks_pkey PRIMARY KEY (name),
    CONSTRAINT sweeper_marks_unaccounted_check CHECK ((unaccounted >= 0))
);

CREATE TABLE tenant_alert_webhooks (
    tenant text NOT NULL,
    url text NOT NULL,
    secret text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT tenant_alert_webhooks_pkey PRIMARY KEY (tenant),
    CONSTRAINT tenant_alert_webhooks_secret_check CHECK (((length(secret) >= 1) AND (length(secret) <= 200))),
    CONSTRAINT tenant_alert_webhooks_tenant_check CHECK (((length(tenant) >= 1) AND (length(tenant) <= 100))),
    CONSTRAINT tenant_alert_webhooks_url_check CHECK (((url ~ '^https?://'::text) AND (length(url) <= 2000)))
);

CREATE TABLE tenant_limits (
    tenant text NOT NULL,
    rate_per_second double precision,
    burst integer,
    max_in_flight integer,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    max_running integer,
    daily_tokens bigint,
    CONSTRAINT tenant_limits_burst_check CHECK ((burst >= 1)),
    CONSTRAINT tenant_limits_daily_tokens_check CHECK ((daily_tokens >= 1)),
    CONSTRAINT tenant_limits_max_in_flight_check CHECK ((max_in_flight >= 1)),
    CONSTRAINT tenant_limits_max_running_check CHECK ((max_running >= 1)),
    CONSTRAINT tenant_limits_pkey PRIMARY KEY (tenant),
    CONSTRAINT tenant_limits_rate_per_second_check CHECK ((rate_per_second > (0)::double precision))
);

CREATE TABLE tenant_token_days (
    tenant text NOT NULL,
    day date NOT NULL,
    tokens bigint DEFAULT 0 NOT NULL,
    CONSTRAINT tenant_token_days_pkey PRIMARY KEY (tenant, day),
    CONSTRAINT tenant_token_days_tokens_check CHECK ((tokens >= 0))
);

CREATE TABLE workers (
    id text NOT NULL,
    name text NOT NULL,
    runtime text NOT NULL,
    host text NOT NULL,
    pid integer NOT NULL,
    carrier text NOT NULL,
    version text NOT NULL,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    last_seen timestamp with time zone DEFAULT now() NOT NULL,
    running integer DEFAULT 0 NOT NULL,
    invocations bigint DEFAULT 0 NOT NULL,
    messages bigint DEFAULT 0 NOT NULL,
    stopped_at timestamp with time zone,
    CONSTRAINT workers_pkey PRIMARY KEY (id),
    CONSTRAINT workers_runtime_check CHECK ((runtime = ANY (ARRAY['process'::text, 'lambda'::text])))
);

CREATE INDEX alerts_created ON public.alerts USING btree (created_at DESC, id DESC);
CREATE INDEX alerts_due ON public.alerts USING btree (next_attempt_at) WHERE ((delivered_at IS NULL) AND (given_up_at IS NULL));
CREATE INDEX alerts_tenant ON public.alerts USING btree (tenant, created_at DESC, id DESC);
CREATE INDEX api_keys_tenant ON public.api_keys USING btree (tenant, created_at);
CREATE INDEX bulk_operations_tenant ON public.bulk_operations USING btree (tenant, created_at DESC);
CREATE INDEX bulk_operations_unfinished ON public.bulk_operations USING btree (lease_expires_at) WHERE (state = 'running'::text);
CREATE INDEX chart_buckets_at ON public.chart_buckets USING btree (width, at);
CREATE INDEX effects_model_recorded ON public.effects USING btree (recorded_at) WHERE (model IS NOT NULL);
CREATE INDEX job_events_job ON public.job_events USING btree (job_id, id);
CREATE INDEX job_events_tx ON public.job_events USING btree (tx, id);
CREATE INDEX job_messages_unread ON public.job_messages USING btree (job_id, topic, id) WHERE (consumed_at IS NULL);
CREATE INDEX job_output_job ON public.job_output USING btree (job_id, tx, id);
CREATE INDEX job_output_tx ON public.job_output USING btree (tx, id);
CREATE INDEX jobs_children ON public.jobs USING btree (parent_id, created_at, id) WHERE (parent_id IS NOT NULL);
CREATE INDEX jobs_created ON public.jobs USING btree (created_at DESC, id DESC);
CREATE INDEX jobs_dead_letters ON public.jobs USING btree (finished_at, id) WHERE (state = 'dead_lettered'::job_state);
CREATE INDEX jobs_deadline ON public.jobs USING btree (deadline) WHERE ((deadline IS NOT NULL) AND (state = ANY (ARRAY['queued'::job_state, 'leased'::job_state, 'running'::job_state, 'retrying'::job_state, 'stalled'::job_state, 'waiting'::job_state])));
CREATE INDEX jobs_expiring ON public.jobs USING btree (lease_expires_at) WHERE (state = ANY (ARRAY['leased'::job_state, 'running'::job_state]));
CREATE INDEX jobs_finished ON public.jobs USING btree (state, finished_at) WHERE (finished_at IS NOT NULL);
CREATE INDEX jobs_flow_key ON public.jobs USING btree (tenant, flow_key, created_at) WHERE (flow_key IS NOT NULL);
CREATE INDEX jobs_flow_key_claimed ON public.jobs USING btree (tenant, kind, flow_key, key_claimed_at) WHERE ((flow_key IS NOT NULL) AND (key_rate IS NOT NULL));
CREATE INDEX jobs_flow_key_open ON public.jobs USING btree (tenant, kind, flow_key, created_at) WHERE ((flow_key IS NOT NULL) AND (state = ANY (ARRAY['queued'::job_state, 'leased'::job_state, 'running'::job_state, 'waiting'::job_state, 'retrying'::job_state, 'stalled'::job_state])));
CREATE INDEX jobs_forked_from ON public.jobs USING btree (forked_from, created_at) WHERE (forked_from IS NOT NULL);
CREATE INDEX jobs_payload_path ON public.jobs USING gin (payload jsonb_path_ops);
CREATE INDEX jobs_rerun_of ON public.jobs USING btree (rerun_of, created_at) WHERE (rerun_of IS NOT NULL);
CREATE INDEX jobs_state_created ON public.jobs USING btree (state, created_at DESC, id DESC);
CREATE INDEX jobs_state_kind ON public.jobs USING btree (state, kind, created_at, id);
CREATE INDEX jobs_tenant_created ON public.jobs USING btree (tenant, created_at DESC, id DESC);
CREATE INDEX jobs_tenant_dead_letters ON public.jobs USING btree (tenant, finished_at, id) WHERE (state = 'dead_lettered'::job_state);
CREATE INDEX jobs_tenant_in_flight ON public.jobs USING btree (tenant) WHERE (state = ANY (ARRAY['queued'::job_state, 'leased'::job_state, 'running'::job_state, 'retrying'::job_state, 'stalled'::job_state, 'waiting'::job_state]));
CREATE INDEX jobs_tenant_leased ON public.jobs USING btree (tenant, lease_expires_at) WHERE (state = ANY (ARRAY['leased'::job_state, 'running'::job_state]));
CREATE INDEX jobs_tenant_on_queue ON public.jobs USING btree (tenant) WHERE ((NOT parked) AND (state = ANY (ARRAY['queued'::job_state, 'retrying'::job_state, 'stalled'::job_state, 'leased'::job_state, 'running'::job_state])));
CREATE INDEX jobs_tenant_parked ON public.jobs USING btree (tenant, ((priority <> 'high'::text)), ((priority = 'low'::text)), created_at, id) WHERE (parked AND (state = 'queued'::job_state));
CREATE INDEX jobs_tenant_state_created ON public.jobs USING btree (tenant, state, created_at DESC, id DESC);
CREATE INDEX jobs_unfinished_children ON public.jobs USING btree (parent_id) WHERE ((parent_id IS NOT NULL) AND (state = ANY (ARRAY['queued'::job_state, 'leased'::job_state, 'running'::job_state, 'retrying'::job_state, 'stalled'::job_state, 'waiting'::job_state])));
CREATE INDEX jobs_waiting_for_answer ON public.jobs USING btree (updated_at) WHERE ((state = 'waiting'::job_state) AND (wait_kind = ANY (ARRAY['callback'::text, 'children'::text])));
CREATE INDEX jobs_waking ON public.jobs USING btree (wake_at) WHERE ((state = 'waiting'::job_state) AND (wake_at IS NOT NULL));
CREATE INDEX outbox_job ON public.outbox USING btree (job_id);
CREATE INDEX outbox_unsent ON public.outbox USING btree (created_at) WHERE (sent_at IS NULL);
CREATE INDEX schedules_due ON public.schedules USING btree (next_slot) WHERE enabled;
CREATE INDEX schedules_tenant ON public.schedules USING btree (tenant, created_at DESC, id DESC);
CREATE INDEX workers_last_seen ON public.workers USING btree (last_seen);

CREATE OR REPLACE FUNCTION public.alert_on_job_event()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    INSERT INTO alerts (dedup_key, type, tenant, job_id, detail)
    SELECT NEW.to_state::text || ':' || NEW.job_id || ':' || NEW.id,
           'job.' || NEW.to_state::text, j.tenant, j.id,
           jsonb_build_object(
               'kind', j.kind, 'state', NEW.to_state::text,
               'from_state', NEW.from_state::text, 'attempt', NEW.attempt,
               'max_attempts', j.max_attempts, 'error', j.last_error,
               'dead_lettered_by', j.dead_lettered_by, 'detail', NEW.detail,
               'worker', NEW.worker, 'at', NEW.at, 'priority', j.priority)
    FROM jobs j WHERE j.id = NEW.job_id
    ON CONFLICT (dedup_key) DO NOTHING;
    RETURN NULL;
END $function$;

CREATE OR REPLACE FUNCTION public.cancel_children()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    WITH kids AS (
        SELECT id, state FROM jobs
        WHERE parent_id = NEW.id AND state NOT IN ('succeeded', 'dead_lettered', 'cancelled')
        ORDER BY id FOR UPDATE SKIP LOCKED
    ), done AS (
        UPDATE jobs j
        SET state = CASE WHEN j.state IN ('leased', 'running') AND j.lease_expires_at > now()
                         THEN j.state ELSE 'cancelled' END,
            cancel_requested = true,
            finished_at = CASE WHEN j.state IN ('leased', 'running') AND j.lease_expires_at > now()
                               THEN NULL ELSE now() END,
            lease_token = CASE WHEN j.state IN ('leased', 'running') AND j.lease_expires_at > now()
                               THEN j.lease_token END,
            lease_expires_at = CASE WHEN j.state IN ('leased', 'running') AND j.lease_expires_at > now()
                                    THEN j.lease_expires_at END,
            wait_kind = NULL, wait_key = NULL, wake_at = NULL, wait_rule = NULL,
            updated_at = now()
        FROM kids k
        WHERE j.id = k.id
        RETURNING j.id, k.state AS from_state, j.state AS to_state, j.attempt
    )
    INSERT INTO job_events (job_id, from_state, to_state, attempt, detail)
    SELECT id, from_state, 'cancelled', attempt, 'parent ' || NEW.id || ' cancelled'
    FROM done WHERE to_state = 'cancelled';
    RETURN NULL;
END
$function$;

CREATE OR REPLACE FUNCTION public.chart_bucket(seconds double precision)
 RETURNS smallint
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
    SELECT least(28, greatest(0, floor(4 * log(greatest(seconds, 0.01) / 0.01))))::smallint
$function$;

CREATE OR REPLACE FUNCTION public.chart_jobs_inserted()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    INSERT INTO chart_deltas (at, tenant, kind, series, bucket, n)
    SELECT date_bin('1 minute', created_at, timestamptz 'epoch'), tenant, kind, 'submitted', 0,
           count(*)
    FROM new_rows GROUP BY 1, 2, 3;
    RETURN NULL;
END
$function$;

CREATE OR REPLACE FUNCTION public.chart_jobs_updated()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM new_rows
                   WHERE state IN ('succeeded', 'dead_lettered', 'retrying', 'stalled')) THEN
        RETURN NULL;
    END IF;
    WITH moved AS (
        SELECT n.tenant, n.kind,
               CASE WHEN n.state IN ('retrying', 'stalled') THEN 'failed'
                    ELSE n.state::text END AS series,
               date_bin('1 minute', coalesce(n.finished_at, now()), timestamptz 'epoch') AS at,
               CASE WHEN n.state IN ('succeeded', 'dead_lettered') THEN
                   extract(epoch FROM n.finished_at - n.created_at)::float8 END AS latency,
               CASE WHEN n.state IN ('succeeded', 'dead_lettered') THEN
                   extract(epoch FROM n.finished_at - n.started_at)::float8 END AS run
        FROM new_rows n JOIN old_rows o ON o.id = n.id
        WHERE n.state IN ('succeeded', 'dead_lettered', 'retrying', 'stalled')
          AND o.state IS DISTINCT FROM n.state
    )
    INSERT INTO chart_deltas (at, tenant, kind, series, bucket, n)
    SELECT at, tenant, kind, series, 0, count(*) FROM moved GROUP BY 1, 2, 3, 4
    UNION ALL
    SELECT at, tenant, kind, 'latency', chart_bucket(latency), count(*) FROM moved
    WHERE latency IS NOT NULL GROUP BY 1, 2, 3, 5
    UNION ALL
    SELECT at, tenant, kind, 'run', chart_bucket(run), count(*) FROM moved
    WHERE run IS NOT NULL GROUP BY 1, 2, 3, 5;
    RETURN NULL;
END
$function$;

CREATE OR REPLACE FUNCTION public.count_jobs_deleted()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    INSERT INTO job_count_deltas (tenant, kind, state, n)
    SELECT tenant, kind, state, -count(*) FROM old_rows GROUP BY tenant, kind, state;
    RETURN NULL;
END
$function$;

CREATE OR REPLACE FUNCTION public.count_jobs_inserted()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    INSERT INTO job_count_deltas (tenant, kind, state, n)
    SELECT tenant, kind, state, count(*) FROM new_rows GROUP BY tenant, kind, state;
    RETURN NULL;
END
$function$;

CREATE OR REPLACE FUNCTION public.count_jobs_truncated()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    DELETE FROM job_count_deltas;
    DELETE FROM job_counts;
    RETURN NULL;
END
$function$;

CREATE OR REPLACE FUNCTION public.count_jobs_updated()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
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
$function$;

CREATE OR REPLACE FUNCTION public.gather_decided(rule jsonb)
 RETURNS boolean
 LANGUAGE sql
 STABLE
AS $function$
    WITH c AS (
        SELECT count(*) AS n,
               count(*) FILTER (WHERE j.state = 'succeeded') AS ok,
               count(*) FILTER (WHERE j.state IN ('dead_lettered', 'cancelled')) AS failed
        FROM jsonb_array_elements_text(rule -> 'children') AS ids(id)
        JOIN jobs j ON j.id = ids.id::uuid
    )
    SELECT c.failed > (rule ->> 'tolerate')::int
           OR (CASE WHEN (rule ->> 'all')::boolean THEN c.ok + c.failed >= c.n
                    ELSE c.ok >= (rule ->> 'need')::int
                         OR c.n - c.failed < (rule ->> 'need')::int END)
    FROM c
$function$;

CREATE OR REPLACE FUNCTION public.notify_cancel()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM pg_notify('tasklease_cancel', NEW.id::text);
    RETURN NULL;
END;
$function$;

CREATE OR REPLACE FUNCTION public.notify_stream()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    IF EXISTS (SELECT 1 FROM stream_hubs WHERE until > now()) THEN
        PERFORM pg_notify('tasklease_stream', NEW.job_id::text);
    END IF;
    RETURN NULL;
END;
$function$;

CREATE OR REPLACE FUNCTION public.redriven_now(redriven_at timestamp with time zone[], window_seconds double precision)
 RETURNS timestamp with time zone[]
 LANGUAGE sql
 STABLE
AS $function$
    SELECT coalesce(array_agg(at ORDER BY at), '{}')
    FROM unnest(redriven_at || now()) AS t(at)
    WHERE at > now() - make_interval(secs => window_seconds)
$function$;

CREATE OR REPLACE FUNCTION public.redrives_within(redriven_at timestamp with time zone[], window_seconds double precision)
 RETURNS integer
 LANGUAGE sql
 STABLE
AS $function$
    SELECT count(*)::integer FROM unnest(redriven_at) AS t(at)
    WHERE at > now() - make_interval(secs => window_seconds)
$function$;

CREATE OR REPLACE FUNCTION public.wait_answered(j jobs)
 RETURNS boolean
 LANGUAGE sql
 STABLE
AS $function$
    SELECT j.state = 'waiting' AND (
        (j.wait_kind = 'callback' AND EXISTS (
                SELECT 1 FROM callbacks c
                WHERE c.job_id = j.id AND c.key = j.wait_key AND c.state <> 'pending'))
        OR (j.wait_kind = 'children' AND gather_decided(j.wait_rule))
        OR (j.wait_kind = 'message' AND EXISTS (
                SELECT 1 FROM job_messages m
                WHERE m.job_id = j.id AND m.topic = j.wait_key AND m.consumed_at IS NULL)))
$function$;

CREATE OR REPLACE FUNCTION public.wake_job(job uuid, why text)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
DECLARE
    woken jobs;
BEGIN
    UPDATE jobs
    SET state = 'queued', wait_kind = NULL, wait_key = NULL, wake_at = NULL,
        wait_rule = NULL, wake_sent_at = NULL, updated_at = now()
    WHERE id = job AND state = 'waiting'
    RETURNING * INTO woken;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO job_events (job_id, from_state, to_state, attempt, detail)
    VALUES (job, 'waiting', 'queued', woken.attempt, why);
    INSERT INTO outbox (job_id) VALUES (job);
    RETURN true;
END
$function$;

CREATE OR REPLACE FUNCTION public.wake_parent_of_child()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
DECLARE
    parent jobs;
BEGIN
    SELECT * INTO parent FROM jobs WHERE id = NEW.parent_id FOR UPDATE;
    IF FOUND AND parent.state = 'waiting' AND parent.wait_kind = 'children'
       AND parent.wait_rule -> 'children' ? NEW.id::text
       AND gather_decided(parent.wait_rule) THEN
        PERFORM wake_job(parent.id, 'children: ' || parent.wait_key || ' decided by ' || NEW.id);
    END IF;
    RETURN NULL;
END
$function$;

CREATE TRIGGER job_events_alert AFTER INSERT ON public.job_events FOR EACH ROW WHEN (((new.to_state = ANY (ARRAY['dead_lettered'::job_state, 'stalled'::job_state])) AND (new.from_state IS DISTINCT FROM new.to_state))) EXECUTE FUNCTION alert_on_job_event();
CREATE TRIGGER job_events_notify AFTER INSERT ON public.job_events FOR EACH ROW EXECUTE FUNCTION notify_stream();
CREATE TRIGGER job_output_notify AFTER INSERT ON public.job_output FOR EACH ROW EXECUTE FUNCTION notify_stream();
CREATE TRIGGER jobs_cancel_children AFTER UPDATE OF state, cancel_requested ON public.jobs FOR EACH ROW WHEN ((((new.state = 'cancelled'::job_state) AND (old.state IS DISTINCT FROM new.state)) OR (new.cancel_requested AND (NOT old.cancel_requested)))) EXECUTE FUNCTION cancel_children();
CREATE TRIGGER jobs_chart_inserted AFTER INSERT ON public.jobs REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION chart_jobs_inserted();
CREATE TRIGGER jobs_chart_updated AFTER UPDATE ON public.jobs REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION chart_jobs_updated();
CREATE TRIGGER jobs_child_finished AFTER UPDATE OF state ON public.jobs FOR EACH ROW WHEN (((new.parent_id IS NOT NULL) AND (old.state IS DISTINCT FROM new.state) AND (new.state = ANY (ARRAY['succeeded'::job_state, 'dead_lettered'::job_state, 'cancelled'::job_state])))) EXECUTE FUNCTION wake_parent_of_child();
CREATE TRIGGER jobs_count_deleted AFTER DELETE ON public.jobs REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION count_jobs_deleted();
CREATE TRIGGER jobs_count_inserted AFTER INSERT ON public.jobs REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION count_jobs_inserted();
CREATE TRIGGER jobs_count_truncated AFTER TRUNCATE ON public.jobs FOR EACH STATEMENT EXECUTE FUNCTION count_jobs_truncated();
CREATE TRIGGER jobs_count_updated AFTER UPDATE ON public.jobs REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION count_jobs_updated();
CREATE TRIGGER jobs_notify_cancel AFTER UPDATE OF cancel_requested ON public.jobs FOR EACH ROW WHEN ((new.cancel_requested AND (NOT old.cancel_requested) AND (new.state = ANY (ARRAY['leased'::job_state, 'running'::job_state])))) EXECUTE FUNCTION notify_cancel();
