-- lease_release for a lock taken with an at-least hold (LockRequest::at_least): give
-- back one hold of :key if it is still ours (same owner, same token, unexpired). The
-- last hold frees the row as lease_release does once :at_least_us has passed since the
-- lease was taken (acquired_at, on the database clock). Before that the row stays
-- taken, by no hold (hold_count 0), and expires at acquired_at + :at_least_us, when it
-- lapses as any lease does: that may shorten the lease or lengthen it past its TTL.
-- Its owner is no holder meanwhile: nothing renews the row, and lease_acquire
-- re-enters only a row with holds, so the owner finds the key busy too. The last hold
-- drops the row's presence marker: a row with no holder lapses at its expiry, whatever
-- becomes of the process that released it (presence takes over a crashed holder's).
-- Assigned left to right: hold_count is read before it is decremented last.
-- A second at most on a row lock, as lease_release.
-- A lease with no hold left, revoked by an operator (force_release), is freed at
-- once by its holder's release, whatever its at-least hold: that is the holder giving
-- it back, and a revoked lease never outlasts the expiry it had. The count never goes
-- below 0.
SET STATEMENT innodb_lock_wait_timeout = 1 FOR
UPDATE `{table}` SET
    locked = hold_count > 1
        OR (hold_count = 1
            AND acquired_at + INTERVAL :at_least_us MICROSECOND > UTC_TIMESTAMP(6)),
    expires_at = IF(hold_count > 1, expires_at, IF(hold_count = 0, UTC_TIMESTAMP(6),
        GREATEST(UTC_TIMESTAMP(6), acquired_at + INTERVAL :at_least_us MICROSECOND))),
    presence_key = IF(hold_count > 1, presence_key, NULL),
    hold_count = GREATEST(hold_count - 1, 0)
WHERE lock_key = :key
  AND lock_owner = :owner
  AND fencing_token = :token
  AND locked
  AND expires_at > UTC_TIMESTAMP(6)
