-- Presence (LockerBuilder::presence): the waiter that took up the fair grant of :token
-- records its handle's presence marker :presence in it, as lease_acquire.sql records a
-- lease's (see there for the marker, the stamp of this server's lifetime and why the
-- shared try tells a held marker): only while a session holds the marker as the
-- statement runs. A grant handed on by another owner's step cannot carry the marker
-- (only the waiter knows it), so the waiter records it as it takes the grant up, in the
-- same transaction or right after. One row when recorded: from then on the next
-- waiter's handoff takes the grant as soon as the marker's session has ended
-- (fair_take.sql). None when no session held the marker (the grant stays a plain one,
-- lasting its TTL) or the grant is no longer the waiter's.
WITH life AS MATERIALIZED (
    SELECT ((CAST(extract(epoch FROM pg_postmaster_start_time()) * 1000000 AS BIGINT)
             # COALESCE(CAST(extract(epoch FROM (SELECT stats_reset FROM pg_stat_bgwriter))
                             * 1000000 AS BIGINT), 0))
            & 4294967295) << 32 AS stamp
), held AS MATERIALIZED (
    SELECT NOT pg_try_advisory_xact_lock_shared(1936813168, CAST(:presence AS INTEGER)) AS yes
)
UPDATE "{table}" AS l
SET presence_key = life.stamp | CAST(:presence AS BIGINT)
FROM life, held
WHERE held.yes
  AND l.lock_key = :key
  AND l.lock_owner = :owner
  AND l.fencing_token = :token
  AND l.locked
  AND l.hold_count > 0
