-- The locks held now (locked and unexpired on the database clock), by key, with the
-- database's own time so that "expires in" needs no client clock, and how many live
-- waiters of the fair strategy are queued for each, and whether each holder is gone.
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
          AND q.expires_at > UTC_TIMESTAMP(6)) AS waiters,
       -- Whether the holder is gone: its lease records a presence marker of this
       -- server's lifetime that no connection holds any more, so that the next
       -- acquisition takes it at once (as lease_acquire.sql decides it).
       CAST(presence_key IS NOT NULL
            AND lock_strategy <> 'for-update'
            AND IS_USED_LOCK(presence_key) IS NULL
            AND SUBSTRING_INDEX(SUBSTRING_INDEX(presence_key, ':', 2), ':', -1)
                = CAST(@@server_id AS CHAR)
            AND acquired_at >= UTC_TIMESTAMP() + INTERVAL 1 SECOND - INTERVAL (SELECT VARIABLE_VALUE
                FROM information_schema.SESSION_STATUS WHERE VARIABLE_NAME = 'UPTIME') SECOND
            AS SIGNED) AS gone
FROM `{table}`
WHERE locked
  AND expires_at > UTC_TIMESTAMP(6)
ORDER BY lock_key
LIMIT :limit
