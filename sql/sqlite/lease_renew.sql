-- The watchdog's tick: renew, in one statement, every lease in :batch (a JSON array of
-- [key, token] pairs) that :owner still holds with that token, to :ttl_us from now.
-- The keys that come back were renewed; any other key of the batch is lost.
-- A renewal never shortens a lease: after an extension or a re-entry with a longer TTL
-- the later expiry stays, so the holder's own count of its lease stays true.
UPDATE "{table}" AS l SET
    lock_time = n.now,
    lock_duration = max(:ttl_us, l.expires_at - n.now),
    expires_at = max(l.expires_at, n.now + :ttl_us)
FROM (SELECT json_extract(value, '$[0]') AS k, json_extract(value, '$[1]') AS t
      FROM json_each(:batch)) AS b,
     (SELECT CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER) AS now) AS n
WHERE l.lock_key = b.k
  AND l.fencing_token = b.t
  AND l.lock_owner = :owner
  AND l.locked
  AND l.expires_at > n.now
RETURNING lock_key
