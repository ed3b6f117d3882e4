-- sqlock: the semaphores (Locker::semaphore) for SQLite.
--
-- One row per semaphore: its name and N, the number of permits, fixed by the first
-- caller and never changed by sqlock (a caller naming another N is refused). The
-- permits themselves are rows of the lock table, a lease each, on the keys
-- `semaphore:<name>#<slot>` for slot 0 to N - 1: N keys, so never more than N holders,
-- whatever releases, crashes, sweeps or retries happen. An acquisition writes this
-- row first, and so holds the database's write lock for the rest of its transaction:
-- the acquisitions of a semaphore take their permits one at a time, k at once or none.
CREATE TABLE IF NOT EXISTS "sqlock_locks_semaphores" (
    name    TEXT    NOT NULL PRIMARY KEY,
    permits INTEGER NOT NULL CHECK (permits BETWEEN 1 AND 1000)
) WITHOUT ROWID;
