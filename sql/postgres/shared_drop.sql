-- An operator's release of one hold of a name in shared mode, :key (a read, a permit),
-- whoever holds it: its token moves on, so its holder's renewals, releases and fenced
-- writes all fail from now on. The same transaction then counts the name one hold
-- less (shared_leave.sql). One row when a live hold was released.
UPDATE "{table}" SET
    locked = FALSE,
    hold_count = 0,
    expires_at = statement_timestamp(),
    fencing_token = greatest(nextval('"{table}_fence_seq"'), fencing_token + 1)
WHERE lock_key = :key
  AND locked
  AND expires_at - statement_timestamp() > INTERVAL '0'
