-- The for-update strategy's check on a held lock: does the holder's transaction still
-- show the grant it made (its own uncommitted owner and token)? Run as the keepalive,
-- after the holder's own statements, and before COMMIT. A transaction that failed
-- answers with an error (25P02), one that ended no longer shows the grant, and a
-- connection the server ended fails: each means the lock is gone.
SELECT 1 FROM "{table}"
WHERE lock_key = :key
  AND lock_owner = :owner
  AND fencing_token = :token
