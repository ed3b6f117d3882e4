-- Wake locks (LockerBuilder::server_waits): the holder lets the key's wake lock go
-- (see wake_hold.sql) once its release has committed, which wakes the key's waiters
-- that wait for it in the server (wake_wait.sql). 1 when the connection held it.
SELECT CAST(COALESCE(RELEASE_LOCK(CONCAT('sqlock:w:',
                                         MD5(CONCAT(IFNULL(DATABASE(), ''), '.', :wake)))),
                     0) AS SIGNED)
