-- A hold of a name in shared mode (a read of a read-write lock, a semaphore's permit)
-- gives back one hold of :key if it is still ours: same owner, same token, unexpired.
-- The last hold frees the row (locked = FALSE, expiring now). The holds left come
-- back, 0 when this was the last; none when the hold was no longer ours. The caller
-- then gives back the name's count (shared_leave.sql) in the same transaction: the
-- hold's row locked first, then the name's, as every statement that locks both.
-- Not waiting for the commit to reach disk, as lease_release.sql: a release grants
-- nobody, and one lost in a server crash only leaves the hold (and the name's count)
-- to lapse at its expiry. set_config(..., true) holds for the caller's transaction.
-- A lease with no hold left, revoked by an operator (force_release), is freed at
-- once by its holder's release: that is the holder giving it back. The count never
-- goes below 0.
WITH relaxed AS MATERIALIZED (
    SELECT set_config('synchronous_commit', 'off', true) AS setting
)
UPDATE "{table}" SET
    locked = hold_count > 1,
    expires_at = CASE WHEN hold_count > 1 THEN expires_at ELSE statement_timestamp() END,
    hold_count = greatest(hold_count - 1, 0)
FROM relaxed
WHERE lock_key = :key
  AND lock_owner = :owner
  AND fencing_token = :token
  AND locked
  AND expires_at - statement_timestamp() > INTERVAL '0'
RETURNING CAST(hold_count AS BIGINT)
