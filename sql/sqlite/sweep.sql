-- The sweeper: delete at most :limit rows that expired more than :grace_us ago, oldest
-- first. SQLite runs one writer at a time, so expiry is read and rows deleted in one
-- step no renewal can come between. The delete trigger keeps fencing tokens rising.
DELETE FROM "{table}"
WHERE lock_key IN (
    SELECT lock_key FROM "{table}"
    WHERE expires_at < CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER) - :grace_us
      AND lock_strategy <> 'for-update'
    ORDER BY expires_at
    LIMIT :limit)
