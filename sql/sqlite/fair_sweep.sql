-- The sweeper: delete at most :limit places of the fair queue that lapsed at least
-- :grace_us ago (their waiters died or left). A grant handed to such a place lapsed
-- with it.
DELETE FROM "{table}_queue"
WHERE ticket IN (
    SELECT ticket FROM "{table}_queue"
    WHERE expires_at <= CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER) - :grace_us
    ORDER BY ticket
    LIMIT :limit)
