-- Push the expiry of a lease we still hold to :ttl_us from now on the database clock.
-- No row comes back when the lease lapsed, was released or was taken.
UPDATE "{table}" SET
    lock_time = CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER),
    lock_duration = :ttl_us,
    expires_at = CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER) + :ttl_us
WHERE lock_key = :key
  AND lock_owner = :owner
  AND fencing_token = :token
  AND locked
  AND expires_at > CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)
RETURNING expires_at AS expires_us
