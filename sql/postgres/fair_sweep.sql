-- The sweeper: delete at most :limit places of the fair queue that lapsed at least
-- :grace_us ago (their waiters died or left). A grant handed to such a place lapsed
-- with it. SKIP LOCKED passes over places another transaction is writing.
DELETE FROM "{table}_queue"
WHERE ticket IN (
        SELECT ticket FROM "{table}_queue"
        WHERE expires_at <= statement_timestamp() - :grace_us * INTERVAL '1 microsecond'
        ORDER BY ticket
        LIMIT :limit
        FOR UPDATE SKIP LOCKED)
  AND expires_at <= statement_timestamp() - :grace_us * INTERVAL '1 microsecond'
