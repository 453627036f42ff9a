-- API keys.
-- Named queries of app/store/keys.py. Each starts with "-- name: NAME"; app/store/sql
-- loads every file of this folder. Parameters are always bound (%(name)s), never
-- formatted into the text.

-- name: api_key
SELECT id, tenant, admin, salt, secret_hash, revoked_at FROM api_keys WHERE id = %(id)s;

-- name: insert_api_key
INSERT INTO api_keys (id, tenant, name, admin, salt, secret_hash)
VALUES (%(id)s, %(tenant)s, %(name)s, %(admin)s, %(salt)s, %(secret_hash)s)
RETURNING id, tenant, name, admin, created_at, revoked_at;

-- name: list_api_keys
SELECT id, tenant, name, admin, created_at, revoked_at FROM api_keys
WHERE (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)
ORDER BY tenant, created_at, id;

-- name: revoke_api_key
-- Revoking twice keeps the first time.
UPDATE api_keys SET revoked_at = coalesce(revoked_at, now())
WHERE id = %(id)s
RETURNING id, tenant, name, admin, created_at, revoked_at;
