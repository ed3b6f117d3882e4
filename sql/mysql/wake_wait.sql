-- Wake locks (LockerBuilder::server_waits): a waiter that found its key busy waits, on
-- a connection of its own outside the pool, for the key's wake lock (wake_hold.sql) to
-- be let go by its holder, for :wait_us at most (GET_LOCK takes fractions of a
-- second). The name is let go in the same statement: each waiter of the key holds it
-- for a moment in turn, and then tries the row with its one acquisition statement.
-- 2 when nobody held the name as the wait began (the holder keeps none, or has not
-- taken it yet: the waiter polls), 1 when it was let go, 0 when the wait ran out (or
-- was interrupted: NULL).
SELECT CAST(COALESCE(
    IF(IS_FREE_LOCK(CONCAT('sqlock:w:', MD5(CONCAT(IFNULL(DATABASE(), ''), '.', :wake)))) = 1,
       2,
       IF(GET_LOCK(CONCAT('sqlock:w:', MD5(CONCAT(IFNULL(DATABASE(), ''), '.', :wake))),
                   CAST(:wait_us AS DOUBLE) / 1000000) = 1,
          RELEASE_LOCK(CONCAT('sqlock:w:', MD5(CONCAT(IFNULL(DATABASE(), ''), '.', :wake)))),
          0)),
    0) AS SIGNED)
