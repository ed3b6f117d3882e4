-- Wake locks (LockerBuilder::server_waits): a holder keeps, on a connection of its
-- handle's own outside the pool, a GET_LOCK name per key it holds: 'sqlock:w:' and the
-- MD5 of the key's :wake name (the database, the table and the key), 41 characters,
-- within GET_LOCK's 64. Waiters of other processes wait for it (wake_wait.sql), and
-- the holder lets it go once its release has committed (wake_free.sql): they try
-- again the moment the key is free, rather than at their next poll. It only wakes:
-- the row stays the truth, and a wake lock that is missing, or held by a holder whose
-- lease lapsed, costs a waiter its poll, never a grant.
--
-- Waiting 200 ms at most (a waiter holds the name for the length of its one statement
-- only): 1 when taken, 0 when the wait ran out and the key is held without a wake
-- lock.
SELECT CAST(COALESCE(GET_LOCK(CONCAT('sqlock:w:', MD5(CONCAT(IFNULL(DATABASE(), ''), '.', :wake))),
                              0.2), 0) AS SIGNED)
