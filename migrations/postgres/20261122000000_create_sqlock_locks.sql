-- sqlock: the lock table for PostgreSQL.
--
-- One row per lock key. A lease is held while `locked` is true and `expires_at` lies in
-- the future on the database clock; `expires_at` is always written together with
-- `lock_time + lock_duration` so that the expiry index serves the sweeper.
-- Fencing tokens come from a sequence: they only grow, also after a row was deleted.
CREATE SEQUENCE IF NOT EXISTS "sqlock_locks_fence_seq" AS BIGINT;

CREATE TABLE IF NOT EXISTS "sqlock_locks" (
    lock_key      VARCHAR(255)   NOT NULL PRIMARY KEY
                  CHECK (octet_length(lock_key) BETWEEN 1 AND 255),
    lock_owner    VARCHAR(64)    NOT NULL,
    lock_strategy VARCHAR(16)    NOT NULL DEFAULT 'lease',
    locked        BOOLEAN        NOT NULL,
    acquired_at   TIMESTAMPTZ(6) NOT NULL, -- when the current holder took it
    lock_time     TIMESTAMPTZ(6) NOT NULL, -- when it was last taken or renewed
    lock_duration BIGINT         NOT NULL, -- microseconds
    expires_at    TIMESTAMPTZ(6) NOT NULL,
    hold_count    INTEGER        NOT NULL,
    fencing_token BIGINT         NOT NULL
);

CREATE INDEX IF NOT EXISTS "sqlock_locks_expires_at_idx" ON "sqlock_locks" (expires_at);
