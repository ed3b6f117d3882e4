-- Presence (LockerBuilder::presence): take the handle's presence marker, the user-level
-- lock :presence ('sqlock:' with the owner and a count, used once), on the connection
-- the handle keeps for it. Not waiting: 1 when taken, 0 when another connection holds
-- the name. It lives as long as the connection: when the holder's process dies, the
-- server ends the connection and the name is free.
SELECT CAST(COALESCE(GET_LOCK(:presence, 0), 0) AS SIGNED)
