-- Make sure :key has a lock row to hand over: a free one when it has none, its token
-- the floor of deleted rows' tokens (the grant adds one).
INSERT INTO "{table}"
    (lock_key, lock_owner, lock_strategy, locked, acquired_at, lock_time, lock_duration,
     expires_at, hold_count, fencing_token)
SELECT :key, '', 'fair', 0, n.now, n.now, 0, n.now, 0,
       (SELECT floor FROM "{table}_fence" WHERE id = 1)
FROM (SELECT CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER) AS now) AS n
WHERE TRUE
ON CONFLICT (lock_key) DO NOTHING
