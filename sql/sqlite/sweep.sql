-- The sweeper: delete at most :limit rows that expired at least :grace_us ago, oldest
-- first. SQLite runs one writer at a time, so expiry is read and rows deleted in one
-- step no renewal can come between. The delete trigger keeps fencing tokens rising.
-- A row released this instant (its expiry is now) already counts: the bound is
-- inclusive, as acquisitions take a row whose expiry is now.
DELETE FROM "{table}"
WHERE lock_key IN (
    SELECT lock_key FROM "{table}"
    WHERE expires_at <= CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER) - :grace_us
      AND lock_strategy <> 'for-update'
    ORDER BY expires_at
    LIMIT :limit)
