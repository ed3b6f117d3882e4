-- A waiter of :key joins the queue: its ticket orders it among the waiters, and its
-- place lasts :ttl_us unless renewed.
INSERT INTO "{table}_queue" (lock_key, lock_owner, expires_at)
VALUES (:key, :owner, statement_timestamp() + :ttl_us * INTERVAL '1 microsecond')
RETURNING ticket
