-- An operator's revocation of the lock on :key (Locker::force_release), whoever holds
-- it: the row keeps its owner, fencing token and expiry, and loses its holds
-- (hold_count 0). A name held in shared mode (no owner) is left counting its holds:
-- shared_revoke revokes those, and each one's release counts the name down. It stays busy for everyone, its owner included: no acquisition takes
-- a live row, a re-entry needs a hold, and no renewal or extension matches a row with
-- no hold (lease_renew, lease_extend), so its holder finds it lost at its next
-- renewal. Its holder's release frees it at once (lease_release and the others);
-- otherwise it lapses at the expiry it had. So the key is free to others when its
-- holder gives it back, or at that expiry, whichever comes first, and never while the
-- holder may still run. No token is drawn, so the key's fence bucket is not locked
-- (see lease_force_release).
-- The key's row by primary key only. No wait on a row lock: a for-update holder keeps
-- the key's row locked for its whole transaction (refused: it cannot be revoked), and
-- an operator's call must not wait for it; a locked row fails the statement at once
-- (tried again, then reported). The matched count: 1 when a lock with holds was
-- revoked (the caller's lookup then tells a lock with no hold left from a free key).
SET STATEMENT innodb_lock_wait_timeout = 0 FOR
UPDATE `{table}` SET hold_count = 0
WHERE lock_key = :key
  AND locked
  AND hold_count > 0
  AND lock_owner <> ''
  AND expires_at > UTC_TIMESTAMP(6)
