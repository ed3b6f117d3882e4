-- sqlock: the queue of the fair strategy's waiters (Strategy::Fair) for MariaDB.
--
-- One row per waiter. A waiter's ticket orders arrivals; its place lasts while
-- `expires_at` lies in the future on the database clock (UTC_TIMESTAMP(6)), and the
-- waiter renews it as it waits, so a crashed waiter is skipped once its place lapses.
-- A release hands the lock to the live waiter with the lowest ticket and writes the
-- grant's fencing token into `granted_token`; the waiter leaves the queue when it
-- takes the grant up.
CREATE TABLE IF NOT EXISTS `sqlock_locks_queue` (
    ticket        BIGINT      NOT NULL AUTO_INCREMENT,
    lock_key      VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,
    lock_owner    VARCHAR(64) CHARACTER SET ascii NOT NULL,
    expires_at    DATETIME(6) NOT NULL,
    granted_token BIGINT      NULL,
    PRIMARY KEY (ticket),
    KEY `sqlock_locks_queue_key_idx` (lock_key, ticket)
) ENGINE = InnoDB;
