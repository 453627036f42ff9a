-- A job's side effects, each recorded once.
-- Named queries of app/store/effects.py. Each starts with "-- name: NAME"; app/store/sql
-- loads every file of this folder. Parameters are always bound (%(name)s), never
-- formatted into the text.

-- name: record_effect
-- Fenced: only the lease holder records, and not once the job's cancel was asked for
-- (nothing is recorded after a cancel). ON CONFLICT: the first record wins.
-- FOR SHARE waits for a claim in progress and checks the token again once it
-- commits (READ COMMITTED would otherwise read the row as the statement began).
-- model/input_tokens/output_tokens: a model call's usage (NULL for a plain effect).
-- shape: what kind of step it is (app/kinds/steps.py), checked when a replay reaches it.
INSERT INTO effects (job_id, key, seq, result, attempt, worker, model, input_tokens,
                     output_tokens, shape)
SELECT j.id, %(key)s, %(seq)s, %(result)s, j.attempt, j.lease_owner,
       %(model)s, %(input_tokens)s, %(output_tokens)s, %(shape)s
FROM jobs j
WHERE j.id = %(id)s AND j.lease_token = %(token)s AND j.state = 'running'
  AND NOT j.cancel_requested
FOR SHARE OF j
ON CONFLICT (job_id, key) DO NOTHING
RETURNING *;

-- name: get_effect
SELECT * FROM effects WHERE job_id = %(id)s AND key = %(key)s;

-- name: job_effects
-- In the effects' order (a fork inherits the ones before its step in this order).
SELECT * FROM effects WHERE job_id = %(id)s ORDER BY seq, recorded_at, key;

-- name: job_usage
-- A job's model effects: tokens by model.
SELECT model, count(*) AS calls,
       sum(coalesce(input_tokens, 0))::bigint AS input_tokens,
       sum(coalesce(output_tokens, 0))::bigint AS output_tokens
FROM effects WHERE job_id = %(id)s AND model IS NOT NULL
  AND inherited_from IS NULL  -- a fork's inherited calls: its original's usage
GROUP BY model ORDER BY model;

-- name: usage_totals
-- Model effects by tenant, kind, UTC day and model, for days in [since, until].
SELECT j.tenant, j.kind, (e.recorded_at AT TIME ZONE 'UTC')::date AS day, e.model,
       count(*) AS calls,
       sum(coalesce(e.input_tokens, 0))::bigint AS input_tokens,
       sum(coalesce(e.output_tokens, 0))::bigint AS output_tokens
FROM effects e JOIN jobs j ON j.id = e.job_id
WHERE e.model IS NOT NULL AND e.inherited_from IS NULL
  AND e.recorded_at >= (%(since)s::date)::timestamp AT TIME ZONE 'UTC'
  AND e.recorded_at < ((%(until)s::date + 1))::timestamp AT TIME ZONE 'UTC'
  AND (%(tenant)s::text IS NULL OR j.tenant = %(tenant)s::text)
GROUP BY 1, 2, 3, 4 ORDER BY 1, 3, 2, 4;
