-- The sweeper: delete at most :limit places of the fair queue that lapsed at least
-- :grace_us ago (their waiters died or left). A grant handed to such a place lapsed
-- with it.
DELETE FROM `{table}_queue`
WHERE expires_at <= UTC_TIMESTAMP(6) - INTERVAL :grace_us MICROSECOND
ORDER BY ticket
LIMIT :limit
