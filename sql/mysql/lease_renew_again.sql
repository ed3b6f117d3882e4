-- The watchdog's tick, second try: renew the leases of :batch that lease_survivors
-- found still ours after lease_renew met a locked row, as lease_renew does (a hold of
-- a name in shared mode together with its name).
-- Their rows are locked only for a moment (another owner's attempt
-- on a held key, a for-update attempt that backs off from a live lease), so this one
-- waits a second at most on a row lock, and is cut off with the tick all the same.
SET STATEMENT innodb_lock_wait_timeout = 1 FOR
UPDATE JSON_TABLE(:batch, '$[*]' COLUMNS (
           k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin PATH '$[0]',
           t BIGINT PATH '$[1]',
           p VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin PATH '$[2]')) AS b
    STRAIGHT_JOIN `{table}` AS l FORCE INDEX (PRIMARY) ON l.lock_key = b.k AND l.fencing_token = b.t
    LEFT JOIN `{table}` AS p FORCE INDEX (PRIMARY) ON p.lock_key = b.p
-- A renewal never shortens a lease: after an extension or a re-entry with a longer TTL
-- the later expiry stays. A multi-table UPDATE assigns in no set order, so
-- lock_duration reads the same whether it sees expires_at before or after its update.
SET l.lock_time = UTC_TIMESTAMP(6),
    l.lock_duration = GREATEST(:ttl_us, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), l.expires_at)),
    l.expires_at = GREATEST(l.expires_at, UTC_TIMESTAMP(6) + INTERVAL :ttl_us MICROSECOND),
    p.lock_time = UTC_TIMESTAMP(6),
    p.lock_duration = GREATEST(:ttl_us, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), p.expires_at)),
    p.expires_at = GREATEST(p.expires_at, UTC_TIMESTAMP(6) + INTERVAL :ttl_us MICROSECOND)
WHERE l.lock_owner = :owner
  AND l.locked
  AND l.hold_count > 0
  AND l.expires_at > UTC_TIMESTAMP(6)
  AND (b.p IS NULL
       OR (p.locked
           AND p.hold_count > 0
           AND p.expires_at > UTC_TIMESTAMP(6)
           AND (p.lock_owner = '' OR p.lock_owner = :owner)))
