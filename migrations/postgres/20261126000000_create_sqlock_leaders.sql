-- sqlock: the leaders of elections (Locker::election) for PostgreSQL.
--
-- An election is a lease on the key `election:<name>` of the lock table; its term is
-- that lease's fencing token. This table records, per election key, the identity the
-- leader of a term gave: a candidate writes it right after its grant, in a statement
-- that succeeds only while the lease is still its own. An observer reads the lease and
-- this row in one statement and sees a leader only where the row's term is the lease's
-- token, so an identity is never shown with another term than its own. One row per
-- election, overwritten by each new term; plain locks never touch it.
CREATE TABLE IF NOT EXISTS "sqlock_locks_leaders" (
    lock_key    VARCHAR(255) NOT NULL PRIMARY KEY,
    leader_term BIGINT       NOT NULL,
    leader_id   VARCHAR(255) NOT NULL
);
