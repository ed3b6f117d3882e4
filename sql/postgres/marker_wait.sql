-- Waiting in the server (LockerBuilder::server_waits): a waiter that found a key held
-- by a lease recording another handle's presence marker :presence waits, on a
-- connection of its own outside the pool, for that marker to be freed, for :wait_us
-- at most (lock_timeout, set for this session before the wait starts; a wait that
-- runs out fails with 55P03). It asks for the marker in the shared form: it queues
-- behind the holder's standby connection, which waits for the marker exclusively, so
-- it is granted only once every session of the holder is gone (the holder's process
-- died), and it never holds up the takeover (pg_try_advisory_xact_lock_shared there
-- is shared too). The marker is let go in the same statement: the row stays the
-- truth, and the waiter goes on with its one acquisition statement. 1 when the
-- marker was freed.
WITH timeout AS MATERIALIZED (
    SELECT set_config('lock_timeout', CAST(GREATEST(CAST(:wait_us AS BIGINT) / 1000, 1) AS TEXT),
                      false) AS ms
), waited AS MATERIALIZED (
    SELECT pg_advisory_lock_shared(1936813168, CAST(:presence AS INTEGER)) FROM timeout
)
SELECT CAST(count(pg_advisory_unlock_shared(1936813168, CAST(:presence AS INTEGER))) AS BIGINT)
FROM waited
