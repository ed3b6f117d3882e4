-- sqlock: the queue of the fair strategy's waiters (Strategy::Fair) for SQLite.
--
-- One row per waiter. A waiter's ticket orders arrivals (AUTOINCREMENT: never reused);
-- its place lasts while `expires_at` (microseconds since the Unix epoch) lies in the
-- future, and the waiter renews it as it waits, so a crashed waiter is skipped once
-- its place lapses. A release hands the lock to the live waiter with the lowest ticket
-- and writes the grant's fencing token into `granted_token`; the waiter leaves the
-- queue when it takes the grant up.
CREATE TABLE IF NOT EXISTS "sqlock_locks_queue" (
    ticket        INTEGER PRIMARY KEY AUTOINCREMENT,
    lock_key      TEXT    NOT NULL,
    lock_owner    TEXT    NOT NULL,
    expires_at    INTEGER NOT NULL,
    granted_token INTEGER
);

CREATE INDEX IF NOT EXISTS "sqlock_locks_queue_key_idx" ON "sqlock_locks_queue" (lock_key, ticket);
