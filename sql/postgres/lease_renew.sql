-- The watchdog's tick: renew, in one statement, every lease in :batch (a JSON array of
-- [key, token] pairs) that :owner still holds with that token, to :ttl_us from now.
-- The keys that come back were renewed; any other key of the batch is lost.
-- A renewal never shortens a lease: after an extension or a re-entry with a longer TTL
-- the later expiry stays, so the holder's own count of its lease stays true.
UPDATE "{table}" AS l SET
    lock_time = statement_timestamp(),
    lock_duration = greatest(:ttl_us,
        (extract(epoch FROM l.expires_at - statement_timestamp()) * 1000000)::BIGINT),
    expires_at = greatest(l.expires_at,
        statement_timestamp() + :ttl_us * INTERVAL '1 microsecond')
FROM jsonb_array_elements(:batch::jsonb) AS b(v)
WHERE l.lock_key = b.v->>0
  AND l.fencing_token = (b.v->>1)::BIGINT
  AND l.lock_owner = :owner
  AND l.locked
  AND l.expires_at > statement_timestamp()
RETURNING l.lock_key
