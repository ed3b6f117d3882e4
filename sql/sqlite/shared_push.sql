-- First in the extension of a hold of a name in shared mode (db/shared.rs): the name
-- :key is pushed to expire no sooner than :ttl_us from now, as the hold is next, in
-- the same transaction (lease_extend.sql), so that the name never expires before a
-- hold of it. It is pushed while it is live and held in shared mode, or by :owner (a
-- downgrade's name, held by its writer); no row matches otherwise, and the caller
-- extends nothing. An expiry already later stays.
UPDATE "{table}" AS l SET
    lock_time = n.now,
    lock_duration = max(:ttl_us, l.expires_at - n.now),
    expires_at = max(l.expires_at, n.now + :ttl_us)
FROM (SELECT CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER) AS now) AS n
WHERE l.lock_key = :key
  AND (l.lock_owner = '' OR l.lock_owner = :owner)
  AND l.locked
  AND l.expires_at > n.now
