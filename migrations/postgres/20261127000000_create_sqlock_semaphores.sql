-- sqlock: the semaphores (Locker::semaphore) for PostgreSQL.
--
-- One row per semaphore: its name and N, the number of permits, fixed by the first
-- caller and never changed by sqlock (a caller naming another N is refused). The
-- permits themselves are rows of the lock table, a lease each, on the keys
-- `semaphore:<name>#<slot>` for slot 0 to N - 1: N keys, so never more than N holders,
-- whatever releases, crashes, sweeps or retries happen. An acquisition locks this
-- row first, so that the acquisitions of one semaphore take their permits one at a
-- time, k at once or none.
CREATE TABLE IF NOT EXISTS "sqlock_locks_semaphores" (
    name    VARCHAR(255) NOT NULL PRIMARY KEY
            CHECK (octet_length(name) BETWEEN 1 AND 255),
    permits INTEGER      NOT NULL CHECK (permits BETWEEN 1 AND 1000)
);
