-- The sweeper's second step: delete the rows sweep_claim locked (:batch, a JSON array
-- of [key, 0] pairs), checking expiry again on each row as it stands, so a lease
-- renewed or taken in between is never deleted. The rows are this transaction's
-- already: nothing waits. Primary-key lookups only, as in lease_renew.
-- A row fair waiters are queued for (queued, see the migration) stays: its flag keeps
-- a fair newcomer from taking the key in one statement past them.
DELETE l FROM JSON_TABLE(:batch, '$[*]' COLUMNS (
           k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin PATH '$[0]')) AS b
    STRAIGHT_JOIN `{table}` AS l FORCE INDEX (PRIMARY) ON l.lock_key = b.k
WHERE l.expires_at <= UTC_TIMESTAMP(6) - INTERVAL :grace_us MICROSECOND
  AND l.lock_strategy <> 'for-update'
  AND NOT l.queued
