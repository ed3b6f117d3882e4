-- Presence: whether this very connection still holds the marker :presence, asked by
-- the watchdog at each tick on the presence connection. 0 or NULL (or an error: the
-- connection is gone) means the marker may have been free for a while, and the leases
-- that record it may have been taken.
SELECT CAST(COALESCE(IS_USED_LOCK(:presence) = CONNECTION_ID(), 0) AS SIGNED)
