-- An operator's revocation of the holds :keys (a JSON array of keys: the reads and
-- permits of a name, shared_holds.sql found them; or one read or permit), whoever holds
-- them, in one statement: as lease_revoke does to a lock, each row keeps its owner,
-- token and expiry and loses its holds, so its holder's renewals and extensions fail
-- and its release frees it at once (and counts its name one hold less, as any release
-- of it does). A name's own row (no owner), which counts those holds, is left as it
-- is: each hold's release counts it down. The count is of the holds revoked.
UPDATE "{table}" SET hold_count = 0
WHERE lock_key IN (SELECT value FROM json_each(:keys))
  AND lock_owner <> ''
  AND locked
  AND hold_count > 0
  AND expires_at > CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)
