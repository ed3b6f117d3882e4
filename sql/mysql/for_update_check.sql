-- The for-update strategy's check on a held lock: is the holder's transaction still
-- open, and does it still show the grant it made (its own uncommitted owner and
-- token)? Run as the keepalive, after the holder's own statements, and before COMMIT.
-- A deadlock or lock wait timeout in the holder's own statement rolls the whole
-- transaction back and frees the row lock; later statements would autocommit. Then
-- no row comes back, and the lock is gone.
SELECT 1 FROM `{table}`
WHERE @@in_transaction = 1
  AND lock_key = :key
  AND lock_owner = :owner
  AND fencing_token = :token
