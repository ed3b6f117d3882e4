-- An operator's release of the holds :keys (a JSON array of keys, shared_holds.sql
-- found them), whoever holds them, in one statement: their tokens move on, so their
-- holders' renewals, releases and fenced writes all fail from now on. The batch drives
-- the join, one primary-key lookup a key, as in lease_renew.sql. A multi-table UPDATE
-- assigns in no set order: each assignment reads its own column alone. A second at most
-- on a row lock (a renewal, a release under way; no hold of these keys is a row lock
-- kept for a transaction): tried again, then reported.
SET STATEMENT innodb_lock_wait_timeout = 1 FOR
UPDATE JSON_TABLE(:keys, '$[*]' COLUMNS (
           k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin PATH '$')) AS b
    STRAIGHT_JOIN `{table}` AS l FORCE INDEX (PRIMARY) ON l.lock_key = b.k
SET l.fencing_token = GREATEST(NEXTVAL(`{table}_fence_seq`), l.fencing_token + 1),
    l.hold_count = 0,
    l.expires_at = UTC_TIMESTAMP(6),
    l.locked = FALSE
WHERE l.locked
  AND l.expires_at > UTC_TIMESTAMP(6)
