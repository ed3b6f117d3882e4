-- Wake locks (LockerBuilder::server_waits): the holder lets the key's wake lock go
-- (see wake_hold.sql) once its release has committed, which wakes the key's waiters
-- that wait for it in the server (wake_wait.sql). True when the session held it.
SELECT pg_advisory_unlock(1936813169, hashtext(current_schema() || '.' || :wake))
