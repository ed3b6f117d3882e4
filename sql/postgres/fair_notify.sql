-- With notifications on (LockerBuilder::notify_waiters), a handoff names the waiter it
-- handed the lock to, by ticket, on the table's grant channel: only that waiter is
-- woken. Sent inside the handoff's transaction, so PostgreSQL delivers it at commit,
-- when the grant is there to take up.
SELECT pg_notify('{grant_channel}', CAST(:ticket AS TEXT))
