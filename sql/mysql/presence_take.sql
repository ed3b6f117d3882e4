-- Presence (LockerBuilder::presence): take the handle's presence marker, the user-level
-- lock :presence ('sqlock:' with the server's id and the owner), on the connection the
-- handle keeps for it. Not waiting: 1 when taken, 0 when another connection holds the
-- name. It lives as long as the connection: when the holder's process dies, the server
-- ends the connection and the name is free. Taken once per handle and server; after
-- that the handle's standby connection takes the same name back by waiting for it
-- (presence_wait.sql).
SELECT CAST(COALESCE(GET_LOCK(:presence, 0), 0) AS SIGNED)
