-- sqlock: the quorum tokens of quorum locks (sqlock::Quorum) for MariaDB.
--
-- A quorum lock holds a lease of the lock table on a majority of independent
-- databases. Its fencing token rises across them: a holder that won a majority reads
-- here, on each server it holds, the highest quorum token ever granted for the key,
-- and writes the highest it read plus one back to a majority before it reports the
-- grant, in a statement that succeeds only while its lease on that server is still
-- its own. Any two majorities share a server, so a later grant reads at least every
-- earlier one's token. One row per key, only ever raised; nothing sweeps it.
CREATE TABLE IF NOT EXISTS `sqlock_locks_quorum` (
    lock_key     VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,
    quorum_token BIGINT       NOT NULL,
    PRIMARY KEY (lock_key)
) ENGINE = InnoDB;
