-- sqlock: the queue of the fair strategy's waiters (Strategy::Fair) for PostgreSQL.
--
-- One row per waiter. A waiter's ticket orders arrivals; its place lasts while
-- `expires_at` lies in the future on the database clock, and the waiter renews it as
-- it waits, so a crashed waiter is skipped once its place lapses. A release hands the
-- lock to the live waiter with the lowest ticket and writes the grant's fencing token
-- into `granted_token`; the waiter leaves the queue when it takes the grant up.
CREATE TABLE IF NOT EXISTS "sqlock_locks_queue" (
    ticket        BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    lock_key      VARCHAR(255)   NOT NULL,
    lock_owner    VARCHAR(64)    NOT NULL,
    expires_at    TIMESTAMPTZ(6) NOT NULL,
    granted_token BIGINT
);

CREATE INDEX IF NOT EXISTS "sqlock_locks_queue_key_idx" ON "sqlock_locks_queue" (lock_key, ticket);
