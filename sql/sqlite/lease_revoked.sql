-- After a renewal found leases of :batch (a JSON array of [key, token] pairs) no longer
-- :owner's: which of them were revoked by an operator (lease_revoke, shared_revoke)?
-- Such a row is still :owner's, with the same token, live, but with no hold left: its
-- holder is to give it back. The others were lost otherwise. Asked only after a
-- renewal lost something, so it costs nothing on the renewal's own path.
SELECT l.lock_key
FROM json_each(:batch) AS j
JOIN "{table}" AS l ON l.lock_key = json_extract(j.value, '$[0]')
WHERE l.fencing_token = json_extract(j.value, '$[1]')
  AND l.lock_owner = :owner
  AND l.locked
  AND l.hold_count = 0
  AND l.expires_at > CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)
