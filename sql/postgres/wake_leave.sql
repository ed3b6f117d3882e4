-- Wake locks (LockerBuilder::server_waits): a waiter lets its key's wake turn go (see
-- wake_wait.sql) once the attempt that followed its wait has answered, or once its wait
-- ran out: the next waiter's wait for the wake lock starts. The connection is one
-- that only ever waits, and holds no other advisory lock past a statement: every lock
-- it holds is let go, however often its waits took the turn again.
SELECT CAST(count(*) AS BIGINT) FROM (SELECT pg_advisory_unlock_all()) AS done
