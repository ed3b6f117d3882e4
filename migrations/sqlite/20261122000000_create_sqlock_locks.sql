-- sqlock: the lock table for SQLite.
--
-- One row per lock key. Times are microseconds since the Unix epoch (UTC). A lease is
-- held while `locked` is 1 and `expires_at` lies in the future.
-- SQLite has no sequences: a fresh row's fencing token is one above a floor kept in
-- the `_fence` table, which a trigger raises to the token of every deleted row, so a
-- key's tokens keep growing after its row was deleted.
CREATE TABLE IF NOT EXISTS "sqlock_locks" (
    lock_key      TEXT    NOT NULL PRIMARY KEY
                  CHECK (length(CAST(lock_key AS BLOB)) BETWEEN 1 AND 255),
    lock_owner    TEXT    NOT NULL,
    lock_strategy TEXT    NOT NULL DEFAULT 'lease',
    locked        INTEGER NOT NULL,
    acquired_at   INTEGER NOT NULL, -- when the current holder took it
    lock_time     INTEGER NOT NULL, -- when it was last taken or renewed
    lock_duration INTEGER NOT NULL, -- microseconds
    expires_at    INTEGER NOT NULL,
    hold_count    INTEGER NOT NULL,
    fencing_token INTEGER NOT NULL
) WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS "sqlock_locks_expires_at_idx" ON "sqlock_locks" (expires_at);

CREATE TABLE IF NOT EXISTS "sqlock_locks_fence" (
    id    INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    floor INTEGER NOT NULL
);

INSERT OR IGNORE INTO "sqlock_locks_fence" (id, floor) VALUES (1, 0);

CREATE TRIGGER IF NOT EXISTS "sqlock_locks_fence_floor" AFTER DELETE ON "sqlock_locks"
BEGIN
    UPDATE "sqlock_locks_fence" SET floor = max(floor, OLD.fencing_token) WHERE id = 1;
END;
