-- Wake locks (LockerBuilder::server_waits): a waiter of a shared hold (a read of a
-- read-write lock, which a writer's write side keeps from it) waits, on a connection
-- of its own outside the pool, for the key's wake lock (wake_hold.sql) to be let go by
-- its holder, for :wait_us at most (GET_LOCK takes fractions of a second). No turns
-- (see wake_wait.sql): every such waiter may be granted at the release. The name is
-- let go in the same statement, so each of them holds it for a moment in turn, and
-- then tries with its one statement. 2 when nobody held the name as the wait began
-- (the holder keeps none, or has not taken it yet), 1 when it was let go, 0 when the
-- wait ran out (or was interrupted: NULL).
SELECT CAST(COALESCE(
    IF(IS_FREE_LOCK(CONCAT('sqlock:w:', MD5(CONCAT(IFNULL(DATABASE(), ''), '.', :wake)))) = 1,
       2,
       IF(GET_LOCK(CONCAT('sqlock:w:', MD5(CONCAT(IFNULL(DATABASE(), ''), '.', :wake))),
                   CAST(:wait_us AS DOUBLE) / 1000000) = 1,
          RELEASE_LOCK(CONCAT('sqlock:w:', MD5(CONCAT(IFNULL(DATABASE(), ''), '.', :wake)))),
          0)),
    0) AS SIGNED)
