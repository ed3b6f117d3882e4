-- An operator's release of one hold of a name in shared mode, :key (a read, a permit),
-- whoever holds it: its token moves on, so its holder's renewals, releases and fenced
-- writes all fail from now on. The same transaction then counts the name one hold
-- less (shared_leave.sql). Assigned left to right: the token first, while the row
-- reads as held. A second at most on a row lock (a renewal, a release under way; no
-- hold of this kind is a row lock kept for a transaction): tried again, then reported.
SET STATEMENT innodb_lock_wait_timeout = 1 FOR
UPDATE `{table}` SET
    fencing_token = GREATEST(NEXTVAL(`{table}_fence_seq`), fencing_token + 1),
    hold_count = 0,
    expires_at = UTC_TIMESTAMP(6),
    locked = FALSE
WHERE lock_key = :key
  AND locked
  AND expires_at > UTC_TIMESTAMP(6)
