-- Wake locks (LockerBuilder::server_waits): a holder keeps, on a connection of its
-- handle's own outside the pool, a session advisory lock per key it holds, in the
-- two-key form with 1936813169 as the first key (presence markers use 1936813168) and
-- the hash of the key's :wake name (the schema, the table and the key) as the second.
-- Waiters of other processes wait for it in the shared form (wake_wait.sql), and the
-- holder lets it go once its release has committed (wake_free.sql): they try again
-- the moment the key is free, rather than at their next poll. It only wakes: the row
-- stays the truth, and a wake lock that is missing, or held by a holder whose lease
-- lapsed, costs a waiter its poll, never a grant.
--
-- Waiting 200 ms at most (a waiter holds the lock in the shared form for the length
-- of its one statement only): a wait that runs out fails with 55P03, and the key is
-- held without a wake lock.
WITH timeout AS MATERIALIZED (
    SELECT set_config('lock_timeout', '200', false) AS ms
), taken AS MATERIALIZED (
    SELECT pg_advisory_lock(1936813169, hashtext(current_schema() || '.' || :wake)) FROM timeout
)
SELECT CAST(count(*) AS BIGINT) FROM taken
