-- Presence (LockerBuilder::presence): which server a presence connection reached. The
-- handle's marker name carries it (sqlock:<server_id>:<owner>), so that a marker is
-- trusted for a takeover only on the server that recorded it: a promoted replica has
-- a server_id of its own (replication refuses two servers with one id).
SELECT CAST(@@server_id AS SIGNED)
