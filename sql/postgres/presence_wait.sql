-- Presence (LockerBuilder::presence): the standby's wait. A second connection of the
-- handle waits for the marker :presence, which its holder connection keeps: the wait
-- ends, with the marker taken, the moment the holder's session ends (killed, timed
-- out, its server connection gone). The lock manager hands a released lock to its
-- waiter in the same step, so no other session can take the marker in between, and
-- the handle learns within a round trip that its holder connection ended. A wait
-- cancelled (pg_cancel_backend) fails with 57014 and is simply sent again.
SELECT CAST(1 AS BIGINT) FROM pg_advisory_lock(1936813168, CAST(:presence AS INTEGER))
