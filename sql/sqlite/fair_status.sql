-- A waiter's standing: the fencing token of the grant handed to it (0 for none), how
-- many live waiters without a grant are ahead of it (a waiter handed the lock holds
-- it: the next one is the first to wait, and finds the lock free should its holder,
-- who never took the grant up, be gone), and whether the lock is free to hand on (1: no
-- row, a free row or a lapsed lease; the first waiter then polls under the key's
-- gate, which hands it on). No row when its place is gone.
-- No holder's marker to wait on in the server: SQLite's markers are files beside the
-- database (the holder column, which the servers answer, is NULL).
SELECT COALESCE(q.granted_token, 0),
       (SELECT count(*) FROM "{table}_queue" AS a
        WHERE a.lock_key = q.lock_key
          AND a.ticket < q.ticket
          AND a.granted_token IS NULL
          AND a.expires_at > CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)),
       CASE WHEN EXISTS (SELECT 1 FROM "{table}" AS l
                         WHERE l.lock_key = q.lock_key
                           AND l.locked
                           AND l.expires_at > CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER))
            THEN 0 ELSE 1 END,
       CAST(NULL AS TEXT) AS holder
FROM "{table}_queue" AS q
WHERE q.ticket = :ticket
  AND q.lock_key = :key
