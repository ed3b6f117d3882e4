-- A waiter's standing: the fencing token of the grant handed to it (0 for none), and
-- how many live waiters are ahead of it. No row when its place is gone.
SELECT CAST(COALESCE(q.granted_token, 0) AS SIGNED),
       CAST((SELECT count(*) FROM `{table}_queue` AS a
             WHERE a.lock_key = q.lock_key
               AND a.ticket < q.ticket
               AND a.expires_at > UTC_TIMESTAMP(6)) AS SIGNED)
FROM `{table}_queue` AS q
WHERE q.ticket = :ticket
  AND q.lock_key = :key
