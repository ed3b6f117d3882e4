-- Presence (LockerBuilder::presence): the waiter that took up the fair grant of :token
-- records its handle's presence marker :presence in it, as lease_acquire.sql records a
-- lease's (see there): only while a connection holds the marker as the statement runs
-- (IS_USED_LOCK is not NULL; only the handle's own connections ever take it). A grant
-- handed on by another owner's step cannot carry the marker (only the waiter knows
-- it), so the waiter records it as it takes the grant up, in the same transaction or
-- right after. One row when recorded: from then on the next waiter's handoff takes
-- the grant as soon as the marker is free (fair_take.sql). None when no connection held
-- the marker (the grant stays a plain one, lasting its TTL) or the grant is no longer
-- the waiter's.
-- A second at most on a row lock, as lease_extend.sql.
SET STATEMENT innodb_lock_wait_timeout = 1 FOR
UPDATE `{table}` SET presence_key = :presence
WHERE lock_key = :key
  AND lock_owner = :owner
  AND fencing_token = :token
  AND locked
  AND hold_count > 0
  AND IS_USED_LOCK(:presence) IS NOT NULL
