-- After a renewal found leases of :batch (a JSON array of [key, token] pairs) no longer
-- :owner's: which of them were revoked by an operator (lease_revoke, shared_revoke)?
-- Such a row is still :owner's, with the same token, live, but with no hold left: its
-- holder is to give it back. The others were lost otherwise. Asked only after a
-- renewal lost something, so it costs nothing on the renewal's own path. A consistent
-- read by primary key, as lease_survivors: it waits on no row lock.
SELECT l.lock_key
FROM JSON_TABLE(:batch, '$[*]' COLUMNS (
         k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin PATH '$[0]',
         t BIGINT PATH '$[1]')) AS b
    STRAIGHT_JOIN `{table}` AS l FORCE INDEX (PRIMARY) ON l.lock_key = b.k AND l.fencing_token = b.t
WHERE l.lock_owner = :owner
  AND l.locked
  AND l.hold_count = 0
  AND l.expires_at > UTC_TIMESTAMP(6)
