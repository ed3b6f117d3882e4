-- Is the lease on :key still held by :owner with :token, unexpired? A consistent read:
-- it waits on no row lock. Asked after a release or extension found the row locked,
-- to tell a short lock (the lease is ours: try again) from a lease that is gone.
SELECT 1 FROM `{table}`
WHERE lock_key = :key
  AND lock_owner = :owner
  AND fencing_token = :token
  AND locked
  AND expires_at > UTC_TIMESTAMP(6)
