-- Wake locks (LockerBuilder::server_waits): a waiter that found its key busy waits, on
-- a connection of its own outside the pool, for the key's wake lock (wake_hold.sql) to
-- be let go by its holder, for :wait_us at most in all (lock_timeout, set for this
-- session before each lock wait starts, to what is left; a wait that runs out fails
-- with 55P03).
--
-- The key's waiters take turns: each first takes the key's wake turn (the advisory
-- lock 1936813170 and the same hash, exclusively, queued in the order they asked), and
-- only the waiter whose turn it is waits for the wake lock. So a release wakes one
-- waiter, not every waiter of the key at once to race for the row. The turn is kept
-- past this statement: the woken waiter tries the row with its one acquisition
-- statement, and then lets its turn go (wake_leave.sql), which starts the next
-- waiter's wait. A waiter's session that ends lets its turn go with it.
--
-- The wake lock is waited for in the shared form, which holds up no holder taking it,
-- and let go in the same statement. 2 when nobody held the wake lock as the wait began
-- (the holder keeps none, or has not taken it yet: the waiter asks again, keeping its
-- turn, or polls), 1 when it was let go.
WITH timeout AS MATERIALIZED (
    SELECT set_config('lock_timeout', CAST(GREATEST(CAST(:wait_us AS BIGINT) / 1000, 1) AS TEXT),
                      false) AS ms
), turn AS MATERIALIZED (
    SELECT pg_advisory_lock(1936813170, hashtext(current_schema() || '.' || :wake)) FROM timeout
), time_left AS MATERIALIZED (
    SELECT set_config('lock_timeout',
                      CAST(GREATEST(CAST(:wait_us AS BIGINT) / 1000
                                    - CAST(1000 * EXTRACT(EPOCH FROM clock_timestamp()
                                                                     - statement_timestamp())
                                           AS BIGINT),
                                    1) AS TEXT),
                      false) AS ms
    FROM turn
), tried AS MATERIALIZED (
    SELECT pg_try_advisory_lock_shared(1936813169,
                                       hashtext(current_schema() || '.' || :wake)) AS free
    FROM time_left
), waited AS MATERIALIZED (
    SELECT pg_advisory_lock_shared(1936813169, hashtext(current_schema() || '.' || :wake))
    FROM tried
    WHERE NOT free
)
SELECT CAST(CASE WHEN (SELECT free FROM tried) THEN 2 ELSE (SELECT count(*) FROM waited) END
            AS BIGINT) AS answer,
       pg_advisory_unlock_shared(1936813169, hashtext(current_schema() || '.' || :wake))
