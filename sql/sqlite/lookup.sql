-- The lock on :key, if it is held now (locked and unexpired on the database clock), as
-- list reports locks (with the live fair waiters queued): a point lookup by primary
-- key.
SELECT lock_key,
       lock_strategy,
       lock_owner,
       fencing_token,
       hold_count,
       acquired_at AS acquired_us,
       expires_at AS expires_us,
       n.now AS now_us,
       (SELECT count(*) FROM "{table}_queue" AS q
        WHERE q.lock_key = "{table}".lock_key
          AND q.granted_token IS NULL
          AND q.expires_at > n.now) AS waiters
FROM "{table}",
     (SELECT CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER) AS now) AS n
WHERE lock_key = :key
  AND locked
  AND expires_at > n.now
