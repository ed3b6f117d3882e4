-- The for-update strategy: lock the key's row by primary key, waiting at most one
-- second (MariaDB takes whole seconds here; longer waits are made of such slices).
-- No row comes back when the key has no row yet.
SELECT fencing_token FROM `{table}` WHERE lock_key = :key FOR UPDATE WAIT 1
