-- API keys are hashed with HMAC-SHA-256 under a server-side secret instead of scrypt
-- (issue 13 item 12): the secrets are 32 random bytes, so a slow hash protects nothing
-- and let a wrong secret for a public key id cost ~80 ms of CPU.

-- The server-side secret when TASKLEASE_KEY_HASH_SECRET is not set: made once, here,
-- from two random UUIDs (244 random bits; gen_random_uuid is built into PostgreSQL 13+).
-- One row at most. It also signs pagination cursors (under another derived key).
CREATE TABLE server_secret (
    only_row    boolean     PRIMARY KEY DEFAULT true CHECK (only_row),
    secret      bytea       NOT NULL CHECK (length(secret) >= 30),
    created_at  timestamptz NOT NULL DEFAULT now()
);
INSERT INTO server_secret (secret)
VALUES (decode(replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''), 'hex'));

-- How a key's secret_hash was made: 'scrypt' (salted, every key before this migration)
-- or 'hmac-sha256' (no salt; hash_secret_id names the server secret it was made under).
-- A scrypt key is re-hashed with HMAC on its next successful check.
ALTER TABLE api_keys ADD COLUMN scheme text NOT NULL DEFAULT 'scrypt'
    CHECK (scheme IN ('scrypt', 'hmac-sha256'));
-- The default stays: an API instance still on the earlier version (during a rolling
-- deploy) inserts scrypt keys without naming the scheme.
ALTER TABLE api_keys ADD COLUMN hash_secret_id text CHECK (hash_secret_id ~ '^[0-9a-f]{16}$');
ALTER TABLE api_keys ALTER COLUMN salt DROP NOT NULL;
ALTER TABLE api_keys ADD CONSTRAINT api_keys_scheme_fields CHECK (
    (scheme = 'scrypt' AND salt IS NOT NULL AND hash_secret_id IS NULL)
    OR (scheme = 'hmac-sha256' AND salt IS NULL AND hash_secret_id IS NOT NULL)
);
