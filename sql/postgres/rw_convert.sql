-- The write side's release, once its last hold was given back in the same transaction
-- (shared_release.sql freed the name): when :owner holds a live read of :key (a
-- downgrade: the writer took the read side), the name goes to that read in shared
-- mode at once, with no moment free: one hold, lasting as long as the read at least,
-- no owner, no presence marker, its fencing token kept. Other readers then get in,
-- and writers keep waiting. No row matches when the owner holds no read: the name
-- stays free.
-- The read's row is read under a share lock: a release of the read under way (which
-- counts the name down only while the name is in shared mode, so not this one) is
-- waited for and its outcome seen, rather than the read as this statement's snapshot
-- shows it, which would leave the name counting a read gone.
WITH r AS MATERIALIZED (
    SELECT expires_at FROM "{table}"
    WHERE lock_key = :key || '@read:' || :owner
      AND lock_owner = :owner
      AND locked
      AND hold_count > 0
      AND expires_at > statement_timestamp()
    FOR SHARE
)
UPDATE "{table}" AS n SET
    locked = TRUE,
    lock_owner = '',
    lock_strategy = 'read',
    hold_count = 1,
    acquired_at = statement_timestamp(),
    lock_time = statement_timestamp(),
    lock_duration = (extract(epoch FROM r.expires_at - statement_timestamp()) * 1000000)::BIGINT,
    expires_at = greatest(n.expires_at, r.expires_at),
    presence_key = NULL
FROM r
WHERE n.lock_key = :key
  AND n.lock_owner = :owner
  AND n.fencing_token = :token
  AND NOT n.locked
