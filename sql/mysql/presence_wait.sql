-- Presence (LockerBuilder::presence): the standby's wait. A second connection of the
-- handle waits for the marker :presence, which its holder connection keeps: the wait
-- ends with 1, the name taken, the moment the holder's connection ends (killed, timed
-- out, gone). MariaDB hands a released name to its waiter in the same step, so no
-- other connection can find it free in between, and the handle learns within a round
-- trip that its holder connection ended. 0 after a year's wait, or NULL when the wait
-- was interrupted (KILL QUERY): the wait is simply sent again.
SELECT CAST(COALESCE(GET_LOCK(:presence, 31536000), 0) AS SIGNED)
