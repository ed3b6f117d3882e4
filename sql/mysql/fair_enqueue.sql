-- A waiter of :key joins the queue: its ticket (AUTO_INCREMENT, back through
-- LAST_INSERT_ID) orders it among the waiters, and its place lasts :ttl_us unless
-- renewed.
INSERT INTO `{table}_queue` (lock_key, lock_owner, expires_at)
VALUES (:key, :owner, UTC_TIMESTAMP(6) + INTERVAL :ttl_us MICROSECOND)
