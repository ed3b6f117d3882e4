-- Presence (LockerBuilder::presence): take the handle's presence marker, a session
-- advisory lock in the two-key form, on the connection the handle keeps for it. The
-- first key, 1936813168, sets presence markers apart from the key gates (which use the
-- one-key form); the second, :presence, is a random positive number the handle drew.
-- Not waiting: false when another session holds that number already (the handle then
-- draws another). The lock lives as long as the session: when the holder's process
-- dies, the server ends the session and the marker is free. Taken once per handle;
-- after that the handle's standby connection takes the same marker back by waiting
-- for it (presence_wait.sql).
SELECT pg_try_advisory_lock(1936813168, CAST(:presence AS INTEGER))
