-- A waiter of :key joins the queue: its ticket orders it among the waiters, and its
-- place lasts :ttl_us unless renewed.
INSERT INTO "{table}_queue" (lock_key, lock_owner, expires_at)
VALUES (:key, :owner, CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER) + :ttl_us)
RETURNING ticket
