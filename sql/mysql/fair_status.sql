-- A waiter's standing: the fencing token of the grant handed to it (0 for none), how
-- many live waiters without a grant are ahead of it (a waiter handed the lock holds
-- it: the next one is the first to wait, and finds the lock free should its holder,
-- who never took the grant up, be gone), and whether the lock is free to hand on (1: no
-- row, a free row, a lapsed lease, or a lease whose holder's presence marker is free,
-- as fair_take.sql finds it; the first waiter then polls under the key's gate, which
-- hands it on). No row when its place is gone.
-- And the holder: the name of the presence marker a live lease of another owner
-- records, of this server (NULL for none), for the first waiter to wait in the server
-- for the moment that marker is freed (marker_wait.sql) rather than sleep to its next
-- poll. A hint only: the poll under the gate decides, as always.
SELECT CAST(COALESCE(q.granted_token, 0) AS SIGNED),
       CAST((SELECT count(*) FROM `{table}_queue` AS a
             WHERE a.lock_key = q.lock_key
               AND a.ticket < q.ticket
               AND a.granted_token IS NULL
               AND a.expires_at > UTC_TIMESTAMP(6)) AS SIGNED),
       CAST(CASE WHEN EXISTS (SELECT 1 FROM `{table}` AS l
                              WHERE l.lock_key = q.lock_key
                                AND l.locked
                                AND l.expires_at > UTC_TIMESTAMP(6)
                                AND NOT (l.presence_key IS NOT NULL
                                    AND l.lock_owner <> q.lock_owner
                                    AND l.lock_strategy <> 'for-update'
                                    AND IS_USED_LOCK(l.presence_key) IS NULL
                                    AND SUBSTRING_INDEX(SUBSTRING_INDEX(l.presence_key, ':', 2),
                                                        ':', -1)
                                        = CAST(@@server_id AS CHAR)
                                    AND l.acquired_at >= UTC_TIMESTAMP() + INTERVAL 1 SECOND
                                        - INTERVAL (SELECT VARIABLE_VALUE
                                            FROM information_schema.SESSION_STATUS
                                            WHERE VARIABLE_NAME = 'UPTIME') SECOND))
                 THEN 0 ELSE 1 END AS SIGNED),
       (SELECT l.presence_key FROM `{table}` AS l
        WHERE l.lock_key = q.lock_key
          AND l.locked
          AND l.expires_at > UTC_TIMESTAMP(6)
          AND l.presence_key IS NOT NULL
          AND l.lock_owner <> q.lock_owner
          AND l.lock_strategy <> 'for-update'
          AND SUBSTRING_INDEX(SUBSTRING_INDEX(l.presence_key, ':', 2), ':', -1)
              = CAST(@@server_id AS CHAR)) AS holder
FROM `{table}_queue` AS q
WHERE q.ticket = :ticket
  AND q.lock_key = :key
