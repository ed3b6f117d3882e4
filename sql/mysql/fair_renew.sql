-- A waiter renews its place for :ttl_us from now, while the place is live: a place
-- that lapsed was skipped, and its waiter joins again at the end.
UPDATE `{table}_queue` SET
    expires_at = UTC_TIMESTAMP(6) + INTERVAL :ttl_us MICROSECOND
WHERE ticket = :ticket
  AND lock_key = :key
  AND expires_at > UTC_TIMESTAMP(6)
