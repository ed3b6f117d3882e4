-- The for-update strategy's single attempt: lock the key's row, or fail at once when
-- another transaction holds it.
SELECT fencing_token FROM `{table}` WHERE lock_key = :key FOR UPDATE NOWAIT
