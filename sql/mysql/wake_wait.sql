-- Wake locks (LockerBuilder::server_waits): a waiter that found its key busy waits, on
-- a connection of its own outside the pool, for the key's wake lock (wake_hold.sql) to
-- be let go by its holder, for :wait_us at most in all (GET_LOCK takes fractions of a
-- second; NOW(6) is the statement's start, SYSDATE(6) the moment it is read, both as
-- seconds since the epoch, which no time zone change moves; on a server started with
-- --sysdate-is-now a wait may last up to twice as long).
--
-- The key's waiters take turns: each first takes the key's wake turn ('sqlock:q:' and
-- the same MD5, queued in the order they asked), and only the waiter whose turn it is
-- waits for the wake lock. So a release wakes one waiter, not every waiter of the key
-- in quick succession to race for the row. The turn is kept past this statement: the
-- woken waiter tries the row with its one acquisition statement, and then lets its turn
-- go (wake_leave.sql), which starts the next waiter's wait. A waiter's connection that
-- ends lets its turn go with it.
--
-- The wake lock is let go in the same statement. 2 when nobody held it as the wait
-- began (the holder keeps none, or has not taken it yet: the waiter asks again,
-- keeping its turn, or polls), 1 when it was let go, 0 when the wait ran out (or was
-- interrupted: NULL).
SELECT CAST(COALESCE(
    IF(GET_LOCK(CONCAT('sqlock:q:', MD5(CONCAT(IFNULL(DATABASE(), ''), '.', :wake))),
                CAST(:wait_us AS DOUBLE) / 1000000) = 1,
       IF(IS_FREE_LOCK(CONCAT('sqlock:w:', MD5(CONCAT(IFNULL(DATABASE(), ''), '.', :wake)))) = 1,
          2,
          IF(GET_LOCK(CONCAT('sqlock:w:', MD5(CONCAT(IFNULL(DATABASE(), ''), '.', :wake))),
                      GREATEST(CAST(:wait_us AS DOUBLE) / 1000000
                               - (UNIX_TIMESTAMP(SYSDATE(6)) - UNIX_TIMESTAMP(NOW(6))),
                               0)) = 1,
             RELEASE_LOCK(CONCAT('sqlock:w:', MD5(CONCAT(IFNULL(DATABASE(), ''), '.', :wake)))),
             0)),
       0),
    0) AS SIGNED)
