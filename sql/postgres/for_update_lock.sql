-- The for-update strategy: lock the key's row by primary key, waiting at most the
-- transaction's lock_timeout; for_update_begin took the key's gate just before. No
-- row comes back when the key has no row yet.
SELECT fencing_token FROM "{table}" WHERE lock_key = :key FOR UPDATE
