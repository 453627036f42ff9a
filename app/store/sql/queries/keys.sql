-- API keys.
-- Named queries of app/store/keys.py. Each starts with "-- name: NAME"; app/store/sql
-- loads every file of this folder. Parameters are always bound (%(name)s), never
-- formatted into the text.

-- name: api_key
SELECT id, tenant, admin, scheme, salt, secret_hash, hash_secret_id, revoked_at
FROM api_keys WHERE id = %(id)s;

-- name: insert_api_key
INSERT INTO api_keys (id, tenant, name, admin, scheme, secret_hash, hash_secret_id)
VALUES (%(id)s, %(tenant)s, %(name)s, %(admin)s, 'hmac-sha256', %(secret_hash)s, %(hash_secret_id)s)
RETURNING id, tenant, name, admin, created_at, revoked_at;

-- name: rehash_api_key
-- After a successful check: the key's hash under the current server secret. Only if the
-- row still holds the hash that was checked (two processes upgrading at once agree).
UPDATE api_keys
SET scheme = 'hmac-sha256', salt = NULL, secret_hash = %(secret_hash)s,
    hash_secret_id = %(hash_secret_id)s
WHERE id = %(id)s AND secret_hash = %(old_hash)s
RETURNING id;

-- name: server_secret
-- The server-side secret migration 0005 made (used when TASKLEASE_KEY_HASH_SECRET is unset).
SELECT secret FROM server_secret;

-- name: list_api_keys
SELECT id, tenant, name, admin, created_at, revoked_at FROM api_keys
WHERE (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)
ORDER BY tenant, created_at, id;

-- name: revoke_api_key
-- Revoking twice keeps the first time.
UPDATE api_keys SET revoked_at = coalesce(revoked_at, now())
WHERE id = %(id)s
RETURNING id, tenant, name, admin, created_at, revoked_at;
