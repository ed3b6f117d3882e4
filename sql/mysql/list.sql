-- The locks held now (locked and unexpired on the database clock), by key, with the
-- database's own time so that "expires in" needs no client clock, and how many live
-- waiters of the fair strategy are queued for each.
SELECT lock_key,
       lock_strategy,
       lock_owner,
       fencing_token,
       hold_count,
       TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', acquired_at) AS acquired_us,
       TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', expires_at) AS expires_us,
       TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) AS now_us,
       (SELECT count(*) FROM `{table}_queue` AS q
        WHERE q.lock_key = `{table}`.lock_key
          AND q.granted_token IS NULL
          AND q.expires_at > UTC_TIMESTAMP(6)) AS waiters
FROM `{table}`
WHERE locked
  AND expires_at > UTC_TIMESTAMP(6)
ORDER BY lock_key
LIMIT :limit
