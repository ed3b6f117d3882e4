-- The locks held now (locked and unexpired on the database clock), by key, with the
-- database's own time so that "expires in" needs no client clock, and how many live
-- waiters of the fair strategy are queued for each.
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
WHERE locked
  AND expires_at > n.now
ORDER BY lock_key
LIMIT :limit
