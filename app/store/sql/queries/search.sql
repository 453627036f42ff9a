-- Search: jobs by the filter of app/services/filters.py (GET /v1/jobs with a search
-- filter), the count a bulk action's dry run answers, and a bulk action's next batch.
-- Named queries of app/store/search.py. Each starts with "-- name: NAME"; app/store/sql
-- loads every file of this folder. Parameters are always bound (%(name)s), never
-- formatted into the text.

-- fragment: job_filter
-- The filter's conditions on a job j, after a condition on its tenant: one place for the
-- three queries below (app/store/sql/__init__.py puts it in each).
AND (%(payload)s::jsonb IS NULL OR j.payload @> %(payload)s::jsonb)
AND (%(id_low)s::uuid IS NULL OR j.id BETWEEN %(id_low)s::uuid AND %(id_high)s::uuid)
AND (%(ids)s::uuid[] IS NULL OR j.id = ANY(%(ids)s::uuid[]))
AND (%(idempotency_key)s::text IS NULL OR j.idempotency_key = %(idempotency_key)s::text)
AND (%(kind)s::text IS NULL OR j.kind = %(kind)s::text)
AND (%(flow_key)s::text IS NULL OR j.flow_key = %(flow_key)s::text)
AND (%(states)s::job_state[] IS NULL OR j.state = ANY(%(states)s::job_state[]))
AND (%(created_after)s::timestamptz IS NULL OR j.created_at >= %(created_after)s::timestamptz)
AND (%(created_before)s::timestamptz IS NULL OR j.created_at < %(created_before)s::timestamptz)
AND (%(finished_after)s::timestamptz IS NULL OR j.finished_at >= %(finished_after)s::timestamptz)
AND (%(finished_before)s::timestamptz IS NULL OR j.finished_at < %(finished_before)s::timestamptz)
AND (%(error)s::text IS NULL OR j.last_error ILIKE %(error)s::text)

-- name: search_jobs
-- A page, newest first from the cursor (created_at, id) on. One branch per way in, gated
-- by a one-time test of its parameters so that a prepared statement's generic plan runs
-- only the branch asked for, each from its index: a payload field (jobs_payload_path,
-- GIN), an id prefix (a range of the primary key), explicit ids, an idempotency key (the
-- jobs_idempotency index, tenant by tenant for an admin: the tenants are read from the
-- counts, a few rows), a flow key (jobs_flow_key, the same way), else a walk of the tenant's (or everyone's) newest jobs. Every
-- other filter is applied on the rows of that branch (a walk stops at the page).
SELECT j.* FROM (
    SELECT j.* FROM jobs j
    WHERE %(payload)s::jsonb IS NOT NULL AND j.payload @> %(payload)s::jsonb
    UNION ALL
    SELECT j.* FROM jobs j
    WHERE %(payload)s::jsonb IS NULL AND %(id_low)s::uuid IS NOT NULL
      AND j.id BETWEEN %(id_low)s::uuid AND %(id_high)s::uuid
    UNION ALL
    SELECT j.* FROM jobs j
    WHERE %(payload)s::jsonb IS NULL AND %(id_low)s::uuid IS NULL
      AND %(ids)s::uuid[] IS NOT NULL AND j.id = ANY(%(ids)s::uuid[])
    UNION ALL
    SELECT j.* FROM jobs j
    WHERE %(payload)s::jsonb IS NULL AND %(id_low)s::uuid IS NULL AND %(ids)s::uuid[] IS NULL
      AND %(idempotency_key)s::text IS NOT NULL
      AND j.tenant IN (SELECT tenant FROM job_counts UNION SELECT tenant FROM job_count_deltas)
      AND j.idempotency_key = %(idempotency_key)s::text
    UNION ALL
    SELECT j.* FROM jobs j
    WHERE %(payload)s::jsonb IS NULL AND %(id_low)s::uuid IS NULL AND %(ids)s::uuid[] IS NULL
      AND %(idempotency_key)s::text IS NULL AND %(flow_key)s::text IS NOT NULL
      AND j.tenant IN (SELECT tenant FROM job_counts UNION SELECT tenant FROM job_count_deltas)
      AND j.flow_key = %(flow_key)s::text
    UNION ALL
    SELECT j.* FROM jobs j
    WHERE %(payload)s::jsonb IS NULL AND %(id_low)s::uuid IS NULL AND %(ids)s::uuid[] IS NULL
      AND %(idempotency_key)s::text IS NULL AND %(flow_key)s::text IS NULL
      AND %(tenant)s::text IS NOT NULL AND j.tenant = %(tenant)s::text
    UNION ALL
    SELECT j.* FROM jobs j
    WHERE %(payload)s::jsonb IS NULL AND %(id_low)s::uuid IS NULL AND %(ids)s::uuid[] IS NULL
      AND %(idempotency_key)s::text IS NULL AND %(flow_key)s::text IS NULL
      AND %(tenant)s::text IS NULL
) AS j
WHERE (%(tenant)s::text IS NULL OR j.tenant = %(tenant)s::text)
  -- use: job_filter
  AND (j.created_at, j.id) < (coalesce(%(after_created)s::timestamptz, 'infinity'),
                             coalesce(%(after_id)s::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff'))
ORDER BY j.created_at DESC, j.id DESC
LIMIT %(limit)s;

-- name: bulk_batch
-- A bulk action's next batch: the matching jobs after the cursor, by id, made no later
-- than the operation, locked until the batch commits (its actions and the cursor with
-- them). The same filter as search_jobs.
SELECT j.id FROM jobs j
WHERE j.id > coalesce(%(cursor)s::uuid, '00000000-0000-0000-0000-000000000000')
  AND j.created_at <= %(made_before)s::timestamptz
  AND (%(tenant)s::text IS NULL OR j.tenant = %(tenant)s::text)
  -- use: job_filter
ORDER BY j.id
LIMIT %(limit)s
FOR UPDATE OF j;

-- name: search_count
-- How many jobs the filter matches now (a bulk action's dry run and its total).
SELECT count(*) AS n FROM jobs j
WHERE (%(tenant)s::text IS NULL OR j.tenant = %(tenant)s::text)
  -- use: job_filter
;
