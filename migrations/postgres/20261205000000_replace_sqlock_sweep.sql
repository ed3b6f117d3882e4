-- sqlock: the sweep procedure (see 20261124000000_create_sqlock_sweep) replaced, to keep
-- the library's sweep rule for fair waiters (sql/postgres/sweep.sql): the row of a key
-- a live place of the fair queue waits for is never swept, so that a fair newcomer
-- cannot take the key in one statement past that waiter; a row whose queued flag
-- outlived every waiter is swept as any other.
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
                  AND NOT EXISTS (SELECT 1 FROM "sqlock_locks_queue" AS q
                                  WHERE q.lock_key = "sqlock_locks".lock_key
                                    AND q.expires_at > clock_timestamp())
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
