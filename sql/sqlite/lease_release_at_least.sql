-- lease_release for a lock taken with an at-least hold (LockRequest::at_least): give
-- back one hold of :key if it is still ours (same owner, same token, unexpired). The
-- last hold frees the row as lease_release does once :at_least_us has passed since the
-- lease was taken (acquired_at, on the database clock). Before that the row stays
-- taken, by no hold (hold_count 0), and expires at acquired_at + :at_least_us, when it
-- lapses as any lease does: that may shorten the lease or lengthen it past its TTL.
-- Its owner is no holder meanwhile: nothing renews the row, and lease_acquire
-- re-enters only a row with holds, so the owner finds the key busy too.
-- A lease with no hold left, revoked by an operator (force_release), is freed at
-- once by its holder's release, whatever its at-least hold: that is the holder giving
-- it back, and a revoked lease never outlasts the expiry it had. The count never goes
-- below 0.
UPDATE "{table}" AS l SET
    locked = l.hold_count > 1 OR (l.hold_count = 1 AND l.acquired_at + :at_least_us > n.now),
    expires_at = CASE WHEN l.hold_count > 1 THEN l.expires_at
                      WHEN l.hold_count = 0 THEN n.now
                      ELSE max(n.now, l.acquired_at + :at_least_us) END,
    hold_count = max(l.hold_count - 1, 0)
FROM (SELECT CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER) AS now) AS n
WHERE l.lock_key = :key
  AND l.lock_owner = :owner
  AND l.fencing_token = :token
  AND l.locked
  AND l.expires_at > n.now
