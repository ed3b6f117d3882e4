-- Waiting in the server (LockerBuilder::server_waits): a waiter that found a key held
-- by a lease recording another handle's presence marker :presence (a GET_LOCK name)
-- waits, on a connection of its own outside the pool, for that name to be freed, for
-- :wait_us at most (GET_LOCK takes fractions of a second). The holder's standby
-- connection waits for the same name: whichever of the two MariaDB hands the name to
-- first, no connection finds it free in between, and while this one holds it for its
-- moment an acquisition counts the lease as busy (conservative). The name is let go
-- in the same statement: the row stays the truth, and the waiter goes on with its
-- one acquisition statement. 1 when the name was freed and taken, 0 when the wait ran
-- out (or was interrupted: NULL).
SELECT CAST(COALESCE(IF(GET_LOCK(:presence, CAST(:wait_us AS DOUBLE) / 1000000) = 1,
                        RELEASE_LOCK(:presence), 0), 0) AS SIGNED)
