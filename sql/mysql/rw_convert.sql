-- The write side's release, once its last hold was given back in the same transaction
-- (shared_release.sql freed the name): when :owner holds a live read of :key (a
-- downgrade: the writer took the read side), the name goes to that read in shared
-- mode at once, with no moment free: one hold, lasting as long as the read at least,
-- no owner, no presence marker, its fencing token kept. Other readers then get in,
-- and writers keep waiting. No row matches when the owner holds no read: the name
-- stays free.
-- A multi-table UPDATE assigns in no set order: every assignment reads the read's row
-- (not updated) and constants only. A second at most on a row lock.
SET STATEMENT innodb_lock_wait_timeout = 1 FOR
UPDATE `{table}` AS n
    STRAIGHT_JOIN `{table}` AS r FORCE INDEX (PRIMARY)
        ON r.lock_key = CONCAT(:key, '@read:', :owner)
SET n.locked = TRUE,
    n.lock_owner = '',
    n.lock_strategy = 'read',
    n.hold_count = 1,
    n.acquired_at = UTC_TIMESTAMP(6),
    n.lock_time = UTC_TIMESTAMP(6),
    n.lock_duration = TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), r.expires_at),
    n.expires_at = GREATEST(UTC_TIMESTAMP(6), r.expires_at),
    n.presence_key = NULL
WHERE n.lock_key = :key
  AND n.lock_owner = :owner
  AND n.fencing_token = :token
  AND NOT n.locked
  AND r.lock_owner = :owner
  AND r.locked
  AND r.hold_count > 0
  AND r.expires_at > UTC_TIMESTAMP(6)
