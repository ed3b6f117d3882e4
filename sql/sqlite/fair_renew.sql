-- A waiter renews its place for :ttl_us from now, while the place is live: a place
-- that lapsed was skipped, and its waiter joins again at the end.
UPDATE "{table}_queue" SET
    expires_at = CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER) + :ttl_us
WHERE ticket = :ticket
  AND lock_key = :key
  AND expires_at > CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)
