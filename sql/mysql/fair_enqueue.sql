-- A waiter of :key joins the queue: its ticket (AUTO_INCREMENT, back through
-- LAST_INSERT_ID) orders it among the waiters, and its place lasts :ttl_us unless
-- renewed.
-- Presence: :presence is the name of the waiter's presence marker ('' for none),
-- recorded on its place as lease_acquire.sql records it on a lease (only while a
-- connection holds it); a handoff copies it onto the grant it hands the waiter
-- (fair_take.sql), so that a grant handed to a waiter whose process died is taken on
-- at once.
INSERT INTO `{table}_queue` (lock_key, lock_owner, expires_at, presence_key)
VALUES (:key, :owner, UTC_TIMESTAMP(6) + INTERVAL :ttl_us MICROSECOND,
        IF(IS_USED_LOCK(NULLIF(:presence, '')) IS NULL, NULL, :presence))
