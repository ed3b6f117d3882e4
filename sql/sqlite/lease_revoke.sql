-- An operator's revocation of the lock on :key (Locker::force_release), whoever holds
-- it: the row keeps its owner, fencing token and expiry, and loses its holds
-- (hold_count 0). A name held in shared mode (no owner) is left counting its holds:
-- shared_revoke revokes those, and each one's release counts the name down. It stays busy for everyone, its owner included: no acquisition takes
-- a live row, a re-entry needs a hold, and no renewal or extension matches a row with
-- no hold (lease_renew, lease_extend), so its holder finds it lost at its next
-- renewal. Its holder's release frees it at once (lease_release and the others);
-- otherwise it lapses at the expiry it had. So the key is free to others when its
-- holder gives it back, or at that expiry, whichever comes first, and never while the
-- holder may still run. The count: 1 when a lock with holds was revoked (the caller's
-- lookup then tells a lock with no hold left from a free key).
UPDATE "{table}" SET hold_count = 0
WHERE lock_key = :key
  AND locked
  AND hold_count > 0
  AND lock_owner <> ''
  AND expires_at > CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)
