-- The sweeper's first step, in a transaction with sweep: lock at most :limit rows that
-- expired at least :grace_us ago, oldest first, through the expiry index. SKIP LOCKED
-- passes over rows another transaction holds, a for-update lock's above all, so a
-- sweep never waits on a held lock. A row released this instant (its expiry is now)
-- already counts: the bound is inclusive.
-- A row fair waiters are queued for (a live place in the queue) stays: it keeps a fair
-- newcomer from taking the key in one statement past them. A row whose queued flag
-- outlived every waiter (they died) goes, flag and all.
SELECT lock_key FROM `{table}`
WHERE expires_at <= UTC_TIMESTAMP(6) - INTERVAL :grace_us MICROSECOND
  AND lock_strategy <> 'for-update'
  AND NOT EXISTS (SELECT 1 FROM `{table}_queue` AS q
                  WHERE q.lock_key = `{table}`.lock_key AND q.expires_at > UTC_TIMESTAMP(6))
ORDER BY expires_at
LIMIT :limit
FOR UPDATE SKIP LOCKED
