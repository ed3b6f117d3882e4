-- Give back one hold of :key if it is still ours: same owner, same token, unexpired.
-- The last hold frees the row (locked = FALSE, expiring now); the row stays for reuse
-- until the sweeper reclaims it. Assigned left to right: hold_count is read before it
-- is decremented last.
UPDATE `{table}` SET
    locked = hold_count > 1,
    expires_at = IF(hold_count > 1, expires_at, UTC_TIMESTAMP(6)),
    hold_count = hold_count - 1
WHERE lock_key = :key
  AND lock_owner = :owner
  AND fencing_token = :token
  AND locked
  AND expires_at > UTC_TIMESTAMP(6)
