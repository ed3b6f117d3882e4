-- Wake locks (LockerBuilder::server_waits): a waiter of a shared hold (a read of a
-- read-write lock, which a writer's write side keeps from it) waits, on a connection
-- of its own outside the pool, for the key's wake lock (wake_hold.sql) to be let go by
-- its holder, for :wait_us at most (lock_timeout, set for this session before the
-- wait starts; a wait that runs out fails with 55P03). No turns (see wake_wait.sql):
-- every such waiter may be granted at the release, so all of them wake together, in
-- the shared form, which holds up no holder taking it. Let go in the same statement:
-- the waiter then tries with its one statement. 2 when nobody held the wake lock as
-- the wait began (the holder keeps none, or has not taken it yet), 1 when it was let
-- go.
WITH timeout AS MATERIALIZED (
    SELECT set_config('lock_timeout', CAST(GREATEST(CAST(:wait_us AS BIGINT) / 1000, 1) AS TEXT),
                      false) AS ms
), tried AS MATERIALIZED (
    SELECT pg_try_advisory_lock_shared(1936813169,
                                       hashtext(current_schema() || '.' || :wake)) AS free
    FROM timeout
), waited AS MATERIALIZED (
    SELECT pg_advisory_lock_shared(1936813169, hashtext(current_schema() || '.' || :wake))
    FROM tried
    WHERE NOT free
)
SELECT CAST(CASE WHEN (SELECT free FROM tried) THEN 2 ELSE (SELECT count(*) FROM waited) END
            AS BIGINT) AS answer,
       pg_advisory_unlock_shared(1936813169, hashtext(current_schema() || '.' || :wake))
