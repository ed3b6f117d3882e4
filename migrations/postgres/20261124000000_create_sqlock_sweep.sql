-- sqlock: the sweeper as a procedure, for a scheduler inside the database (pg_cron).
--
-- CALL "sqlock_locks_sweep"(batch, grace_us, max_batches) reclaims the rows of locks
-- that expired at least grace_us microseconds ago, oldest first, in batches of at most
-- `batch` rows, each committed on its own so that no batch holds many row locks for
-- long; it stops after `max_batches` batches or at the first batch that is not full,
-- and returns the number of rows reclaimed in `reclaimed`. It keeps the library's
-- sweep rules (sql/postgres/sweep.sql): SKIP LOCKED passes over rows another
-- transaction holds, expiry is checked again under the row lock so a lease renewed or
-- taken meanwhile is never deleted, a for-update lock's row is never swept, and
-- fencing tokens keep rising because they come from the sequence, not the row.
-- CALL it as a statement of its own, outside a transaction block (as pg_cron and
-- psql do): a batch's COMMIT is refused inside one.
CREATE OR REPLACE PROCEDURE "sqlock_locks_sweep"(
    batch       INTEGER DEFAULT 1000,
    grace_us    BIGINT  DEFAULT 0,
    max_batches INTEGER DEFAULT 100,
    INOUT reclaimed BIGINT DEFAULT 0)
LANGUAGE plpgsql
AS $sweep$
DECLARE
    deleted BIGINT;
    batches INTEGER := 0;
BEGIN
    IF batch IS NULL OR batch NOT BETWEEN 1 AND 100000 THEN
        RAISE EXCEPTION 'sqlock sweep: batch must lie in 1..=100000, not %', batch
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF grace_us IS NULL OR grace_us < 0 THEN
        RAISE EXCEPTION 'sqlock sweep: grace_us must not be negative, not %', grace_us
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF max_batches IS NULL OR max_batches < 1 THEN
        RAISE EXCEPTION 'sqlock sweep: max_batches must be at least 1, not %', max_batches
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    reclaimed := 0;
    LOOP
        -- clock_timestamp(): the statement time of the CALL would grow older with
        -- each batch; either is the database clock, never a client's.
        DELETE FROM "sqlock_locks"
        WHERE lock_key IN (
                SELECT lock_key FROM "sqlock_locks"
                WHERE expires_at <= clock_timestamp() - grace_us * INTERVAL '1 microsecond'
                  AND lock_strategy <> 'for-update'
                ORDER BY expires_at
                LIMIT batch
                FOR UPDATE SKIP LOCKED)
          AND expires_at <= clock_timestamp() - grace_us * INTERVAL '1 microsecond';
        GET DIAGNOSTICS deleted = ROW_COUNT;
        reclaimed := reclaimed + deleted;
        batches := batches + 1;
        EXIT WHEN deleted < batch OR batches >= max_batches;
        COMMIT;
    END LOOP;
END
$sweep$;
