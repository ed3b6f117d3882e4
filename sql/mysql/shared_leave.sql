-- In the transaction that freed a hold of a name in shared mode (shared_release.sql,
-- or an operator's shared_drop.sql): the name :key, held in shared mode of the kind
-- :strategy ('read' or 'semaphore'), counts one hold less, and is free once it counts
-- none (locked = FALSE, expiring now; the row stays for reuse until swept). A name not
-- held in that mode (a downgrade's name, held by its writer; a name that lapsed) is
-- left as it is: its holder's own release or its expiry frees it. Assigned left to
-- right: hold_count is read before it is decremented last. A second at most on a row
-- lock (a for-update attempt that backs off from the held name).
SET STATEMENT innodb_lock_wait_timeout = 1 FOR
UPDATE `{table}` SET
    locked = hold_count > 1,
    expires_at = IF(hold_count > 1, expires_at, UTC_TIMESTAMP(6)),
    hold_count = hold_count - 1
WHERE lock_key = :key
  AND lock_owner = ''
  AND lock_strategy = :strategy
  AND locked
  AND hold_count > 0
  AND expires_at > UTC_TIMESTAMP(6)
