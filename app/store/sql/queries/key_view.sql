-- Flow control by key, as `tasklease jobs show` shows a keyed job: where it stands on its
-- key (docs/howto/flow-control.md). Read only; named queries of app/store/key_view.py.

-- name: key_position
-- For a keyed job: the other jobs of its key (same tenant, kind and key) holding it
-- (claimed and not finished: a wait or a retry keeps it, as the claim counts them), the
-- ones queued before it, every unfinished one, and the claims of the key's rate-limited
-- jobs within its rate's period. By the key's partial indexes (jobs_flow_key_open,
-- jobs_flow_key_claimed). No row: no such job, or it has no key.
SELECT
    (SELECT count(*) FROM jobs x
     WHERE x.tenant = k.tenant AND x.kind = k.kind AND x.flow_key = k.flow_key
       AND x.id <> k.id
       AND x.state IN ('queued', 'leased', 'running', 'waiting', 'retrying', 'stalled')
       AND (x.state IN ('leased', 'running', 'retrying', 'stalled')
            OR (x.state = 'waiting' AND x.key_claimed_at IS NOT NULL))) AS holding,
    (SELECT count(*) FROM jobs x
     WHERE x.tenant = k.tenant AND x.kind = k.kind AND x.flow_key = k.flow_key
       AND x.id <> k.id AND x.state = 'queued'
       AND (x.created_at, x.id) < (k.created_at, k.id)) AS queued_ahead,
    (SELECT count(*) FROM jobs x
     WHERE x.tenant = k.tenant AND x.kind = k.kind AND x.flow_key = k.flow_key
       AND x.state IN ('queued', 'leased', 'running', 'waiting', 'retrying', 'stalled'))
        AS open,
    CASE WHEN k.key_rate IS NOT NULL THEN
        (SELECT count(*) FROM jobs x
         WHERE x.tenant = k.tenant AND x.kind = k.kind AND x.flow_key = k.flow_key
           AND x.key_rate IS NOT NULL AND x.id <> k.id
           AND x.key_claimed_at > now() - make_interval(secs => k.key_rate_seconds))
    END AS recent_claims
FROM jobs k
WHERE k.id = %(id)s AND k.flow_key IS NOT NULL;
