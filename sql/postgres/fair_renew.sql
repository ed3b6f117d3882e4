-- A waiter renews its place for :ttl_us from now, while the place is live: a place
-- that lapsed was skipped, and its waiter joins again at the end.
UPDATE "{table}_queue" SET
    expires_at = statement_timestamp() + :ttl_us * INTERVAL '1 microsecond'
WHERE ticket = :ticket
  AND lock_key = :key
  AND expires_at > statement_timestamp()
