-- Push the expiry of a lease we still hold to at least :ttl_us from now on the database
-- clock; an expiry already later stays (an extension never shortens a lease, so a
-- renewal in flight and an extension cannot undo each other). No row comes back when
-- the lease lapsed, was released or was taken, or has no hold left (revoked by an
-- operator, whose holder is to give it back).
UPDATE "{table}" AS l SET
    lock_time = n.now,
    lock_duration = max(:ttl_us, l.expires_at - n.now),
    expires_at = max(l.expires_at, n.now + :ttl_us)
FROM (SELECT CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER) AS now) AS n
WHERE l.lock_key = :key
  AND l.lock_owner = :owner
  AND l.fencing_token = :token
  AND l.locked
  AND l.hold_count > 0
  AND l.expires_at > n.now
RETURNING expires_at AS expires_us
