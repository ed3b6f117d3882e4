-- sqlock: the sweeper as a procedure, for a scheduler inside the database (an event).
--
-- CALL `sqlock_locks_sweep`(batch, grace_us, max_batches, @reclaimed) reclaims the
-- rows of locks that expired at least grace_us microseconds ago, oldest first, in
-- batches of at most `batch` rows, each in a transaction of its own so that no batch
-- holds many row locks for long; it stops after `max_batches` batches or at the first
-- batch that is not full, and sets `reclaimed` to the number of rows reclaimed. It
-- keeps the library's sweep rules (sql/mysql/sweep_claim.sql and sweep.sql): the
-- claim locks its rows with SKIP LOCKED, passing over rows another transaction holds,
-- so it never waits on a held lock; the delete checks expiry again on each row as it
-- stands, so a lease renewed or taken meanwhile is never deleted; a for-update lock's
-- row is never swept; fencing tokens keep rising because they come from the sequence.
-- Each batch commits: do not call it inside a transaction of your own.
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
          AND l.lock_strategy <> 'for-update';
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
CREATE OR REPLACE PROCEDURE `sqlock_locks_sweep_every`(
    IN every_s INT,
    IN batch INT,
    IN grace_us BIGINT,
    IN max_batches INT)
MODIFIES SQL DATA
COMMENT 'sqlock: schedules sqlock_locks_sweep as an event'
BEGIN
    IF every_s IS NULL OR every_s < 1 THEN
        SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'sqlock sweep: every_s must be at least 1';
    END IF;
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
    EXECUTE IMMEDIATE CONCAT(
        'CREATE OR REPLACE EVENT `sqlock_locks_sweep` ON SCHEDULE EVERY ', every_s,
        ' SECOND ON COMPLETION PRESERVE ',
        'COMMENT ''sqlock: reclaims the rows of expired locks'' ',
        'DO CALL `sqlock_locks_sweep`(', batch, ', ', grace_us, ', ', max_batches,
        ', @sqlock_reclaimed)');
END;
