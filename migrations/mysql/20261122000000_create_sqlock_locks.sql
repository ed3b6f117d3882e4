-- sqlock: the lock table for MariaDB (10.5 or later).
--
-- One row per lock key. A lease is held while `locked` is true and `expires_at` lies in
-- the future on the database clock (UTC_TIMESTAMP(6): all times are UTC, whatever the
-- session time_zone). Keys compare byte for byte (utf8mb4_nopad_bin): 'a', 'A' and 'a '
-- are three different locks, as on PostgreSQL and SQLite.
-- Fencing tokens come from a sequence: they only grow, also after a row was deleted.
-- An acquisition locks one of 1024 rows of the `_fence` table (by a hash of its key)
-- before it draws a token, so that a token drawn while the statement waits for a row
-- being deleted can never fall behind a grant made meanwhile.
-- NOCACHE: each token is written to the sequence as it is drawn. A Galera cluster
-- refuses a cached sequence (error 1235), and there it makes two nodes drawing at once
-- conflict at certification (retried) instead of handing out tokens from two separate
-- caches, which would not rise in grant order across nodes.
CREATE SEQUENCE IF NOT EXISTS `sqlock_locks_fence_seq` START WITH 1 INCREMENT BY 1 NOCACHE NOCYCLE;

CREATE TABLE IF NOT EXISTS `sqlock_locks` (
    lock_key      VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,
    lock_owner    VARCHAR(64) CHARACTER SET ascii NOT NULL,
    lock_strategy VARCHAR(16) CHARACTER SET ascii NOT NULL DEFAULT 'lease',
    locked        BOOLEAN     NOT NULL,
    acquired_at   DATETIME(6) NOT NULL COMMENT 'when the current holder took it',
    lock_time     DATETIME(6) NOT NULL COMMENT 'when it was last taken or renewed',
    lock_duration BIGINT      NOT NULL COMMENT 'microseconds',
    expires_at    DATETIME(6) NOT NULL,
    hold_count    INT         NOT NULL,
    fencing_token BIGINT      NOT NULL,
    PRIMARY KEY (lock_key),
    KEY `sqlock_locks_expires_at_idx` (expires_at)
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS `sqlock_locks_fence` (
    bucket SMALLINT UNSIGNED NOT NULL PRIMARY KEY
) ENGINE = InnoDB;

INSERT IGNORE INTO `sqlock_locks_fence` (bucket) SELECT seq FROM seq_0_to_1023;
