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
-- Unlike lease_release, this one waits for its commit to reach disk: a release lost in
-- a server crash would leave the lease to lapse at its TTL, which may come before the
-- hold ends, and another owner could then run the work again within the period.
-- Expiry is compared as a difference, which no index serves, so that the planner
-- finds the row by its key (see lease_release).
-- A lease with no hold left, revoked by an operator (force_release), is freed at
-- once by its holder's release, whatever its at-least hold: that is the holder giving
-- it back, and a revoked lease never outlasts the expiry it had. The count never goes
-- below 0.
UPDATE "{table}" SET
    locked = hold_count > 1
        OR (hold_count = 1
            AND acquired_at + :at_least_us * INTERVAL '1 microsecond' > statement_timestamp()),
    expires_at = CASE WHEN hold_count > 1 THEN expires_at
        WHEN hold_count = 0 THEN statement_timestamp()
        ELSE greatest(statement_timestamp(),
                      acquired_at + :at_least_us * INTERVAL '1 microsecond') END,
    presence_key = CASE WHEN hold_count > 1 THEN presence_key END,
    hold_count = greatest(hold_count - 1, 0)
WHERE lock_key = :key
  AND lock_owner = :owner
  AND fencing_token = :token
  AND locked
  AND expires_at - statement_timestamp() > INTERVAL '0'
