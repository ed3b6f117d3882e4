-- sqlock: the sweep procedure (see 20261124000000_create_sqlock_sweep) replaced, to keep
-- the library's sweep rule for fair waiters (sql/mysql/sweep_claim.sql and sweep.sql):
-- the row of a key a live place of the fair queue waits for is never swept, so that a
-- fair newcomer cannot take the key in one statement past that waiter; a row whose
-- queued flag outlived every waiter is swept as any other. The procedure that
-- schedules it as an event calls it by name and stays as it was.
CREATE OR REPLACE PROCEDURE `sqlock_locks_sweep`(
    IN batch INT,
    IN grace_us BIGINT,
    IN max_batches INT,
    OUT reclaimed BIGINT)
MODIFIES SQL DATA
COMMENT 'sqlock: reclaims the rows of expired locks in batches'
BEGIN
    DECLARE claimed LONGTEXT;
    DECLARE batches INT DEFAULT 0;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN
        ROLLBACK;
        RESIGNAL;
    END;
    IF batch IS NULL OR batch NOT BETWEEN 1 AND 100000 THEN
        SIGNAL SQLSTATE '22023'
            SET MESSAGE_TEXT = 'sqlock sweep: batch must lie in 1..=100000';
    END IF;
    IF grace_us IS NULL OR grace_us < 0 THEN
        SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'sqlock sweep: grace_us must not be negative';
    END IF;
    IF max_batches IS NULL OR max_batches < 1 THEN
        SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'sqlock sweep: max_batches must be at least 1';
    END IF;
    SET reclaimed = 0;
    sweeping: LOOP
        START TRANSACTION;
        SELECT JSON_ARRAYAGG(lock_key) INTO claimed FROM (
            SELECT lock_key FROM `sqlock_locks`
            WHERE expires_at <= UTC_TIMESTAMP(6) - INTERVAL grace_us MICROSECOND
              AND lock_strategy <> 'for-update'
              AND NOT EXISTS (SELECT 1 FROM `sqlock_locks_queue` AS q
                              WHERE q.lock_key = `sqlock_locks`.lock_key
                                AND q.expires_at > UTC_TIMESTAMP(6))
            ORDER BY expires_at
            LIMIT batch
            FOR UPDATE SKIP LOCKED) AS c;
        IF claimed IS NULL THEN
            COMMIT;
            LEAVE sweeping;
        END IF;
        DELETE l FROM JSON_TABLE(claimed, '$[*]' COLUMNS (
                   k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin PATH '$')) AS b
            STRAIGHT_JOIN `sqlock_locks` AS l FORCE INDEX (PRIMARY) ON l.lock_key = b.k
        WHERE l.expires_at <= UTC_TIMESTAMP(6) - INTERVAL grace_us MICROSECOND
          AND l.lock_strategy <> 'for-update'
          AND NOT EXISTS (SELECT 1 FROM `sqlock_locks_queue` AS q
                          WHERE q.lock_key = l.lock_key AND q.expires_at > UTC_TIMESTAMP(6));
        SET reclaimed = reclaimed + ROW_COUNT();
        COMMIT;
        SET batches = batches + 1;
        IF JSON_LENGTH(claimed) < batch OR batches >= max_batches THEN
            LEAVE sweeping;
        END IF;
    END LOOP;
END;

-- CALL `sqlock_locks_sweep_every`(every_s, batch, grace_us, max_batches) schedules the
-- sweep as the event `sqlock_locks_sweep`, run every every_s seconds by the event
-- scheduler (which must be on: event_scheduler=ON), replacing the event if it exists.
-- An event's body is stored text and takes no parameters, so it is written here from
-- this procedure's integer arguments, which can hold nothing but digits.
