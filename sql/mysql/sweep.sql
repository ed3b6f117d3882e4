-- The sweeper's second step: delete the rows sweep_claim locked (:batch, a JSON array
-- of [key, 0] pairs), checking expiry again on each row as it stands, so a lease
-- renewed or taken in between is never deleted. The rows are this transaction's
-- already: only the read of the queue's places may wait, a moment, for a place being
-- written. Primary-key lookups only, as in lease_renew.
-- A row fair waiters are queued for (a live place in the queue) stays: it keeps a fair
-- newcomer from taking the key in one statement past them. A row whose queued flag
-- outlived every waiter (they died) goes, flag and all.
DELETE l FROM JSON_TABLE(:batch, '$[*]' COLUMNS (
           k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin PATH '$[0]')) AS b
    STRAIGHT_JOIN `{table}` AS l FORCE INDEX (PRIMARY) ON l.lock_key = b.k
WHERE l.expires_at <= UTC_TIMESTAMP(6) - INTERVAL :grace_us MICROSECOND
  AND l.lock_strategy <> 'for-update'
  AND NOT EXISTS (SELECT 1 FROM `{table}_queue` AS q
                  WHERE q.lock_key = l.lock_key AND q.expires_at > UTC_TIMESTAMP(6))
