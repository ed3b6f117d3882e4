-- An operator's release of the holds :keys (a JSON array of keys, shared_holds.sql
-- found them), whoever holds them, in one statement: their tokens move on, so their
-- holders' renewals, releases and fenced writes all fail from now on. The count is of
-- the holds released.
UPDATE "{table}" SET
    locked = 0,
    hold_count = 0,
    expires_at = CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER),
    fencing_token = fencing_token + 1
WHERE lock_key IN (SELECT value FROM json_each(:keys))
  AND locked
  AND expires_at > CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)
