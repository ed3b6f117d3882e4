-- The head of :key's queue: the live waiter with the lowest ticket that holds no
-- grant yet. Dead waiters (lapsed places) are skipped.
SELECT ticket, lock_owner
FROM "{table}_queue"
WHERE lock_key = :key
  AND granted_token IS NULL
  AND expires_at > CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)
ORDER BY ticket
LIMIT 1
