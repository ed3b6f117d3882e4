-- The sweeper: delete at most :limit rows that expired more than :grace_us ago, oldest
-- first, through the expiry index. InnoDB reads each row as it stands under the row
-- lock it takes for the delete, so a lease renewed or taken while the sweep ran no
-- longer matches and is never deleted. A row locked by a for-update holder is waited
-- for one second at most (such rows are never swept: they are the strategy's
-- reusable lock rows), so that a sweep never stalls behind a long transaction.
SET STATEMENT innodb_lock_wait_timeout = 1 FOR
DELETE FROM `{table}`
WHERE expires_at < UTC_TIMESTAMP(6) - INTERVAL :grace_us MICROSECOND
  AND lock_strategy <> 'for-update'
ORDER BY expires_at
LIMIT :limit
