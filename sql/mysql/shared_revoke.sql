-- An operator's revocation of the holds :keys (a JSON array of keys: the reads and
-- permits of a name, shared_holds.sql found them; or one read or permit), whoever holds
-- them, in one statement: as lease_revoke does to a lock, each row keeps its owner,
-- token and expiry and loses its holds, so its holder's renewals and extensions fail
-- and its release frees it at once (and counts its name one hold less, as any release
-- of it does). A name's own row (no owner), which counts those holds, is left as it
-- is: each hold's release counts it down. The batch drives the join, one primary-key
-- lookup a key, as in lease_renew.sql. A second at most on a row lock (a renewal, a
-- release under way; no hold of these keys is a row lock kept for a transaction):
-- tried again, then reported. The matched count is of the holds revoked.
SET STATEMENT innodb_lock_wait_timeout = 1 FOR
UPDATE JSON_TABLE(:keys, '$[*]' COLUMNS (
           k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin PATH '$')) AS b
    STRAIGHT_JOIN `{table}` AS l FORCE INDEX (PRIMARY) ON l.lock_key = b.k
SET l.hold_count = 0
WHERE l.lock_owner <> ''
  AND l.locked
  AND l.hold_count > 0
  AND l.expires_at > UTC_TIMESTAMP(6)
