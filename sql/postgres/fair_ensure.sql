-- Make sure :key has a lock row to hand over: a free one when it has none. Drawn
-- from no sequence: the grant draws the token.
INSERT INTO "{table}"
    (lock_key, lock_owner, lock_strategy, locked, acquired_at, lock_time, lock_duration,
     expires_at, hold_count, fencing_token)
SELECT :key, '', 'fair', FALSE, statement_timestamp(), statement_timestamp(), 0,
       statement_timestamp(), 0, 0
WHERE NOT EXISTS (SELECT 1 FROM "{table}" WHERE lock_key = :key)
ON CONFLICT (lock_key) DO NOTHING
