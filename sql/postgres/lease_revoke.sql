-- An operator's revocation of the lock on :key (Locker::force_release), whoever holds
-- it: the row keeps its owner, fencing token and expiry, and loses its holds
-- (hold_count 0). A name held in shared mode (no owner) is left counting its holds:
-- shared_revoke revokes those, and each one's release counts the name down. It stays busy for everyone, its owner included: no acquisition takes
-- a live row, a re-entry needs a hold, and no renewal or extension matches a row with
-- no hold (lease_renew, lease_extend), so its holder finds it lost. Its holder's
-- release frees it at once (lease_release and the others); otherwise it lapses at the
-- expiry it had. So the key is free to others when its holder gives it back, or at
-- that expiry, whichever comes first, and never while the holder may still run.
-- The holder is told at once: pg_notify names the key on the table's release channel
-- (delivered at commit), and a handle whose family listens renews its lease of the
-- key at once rather than at its next tick. Sent whatever this handle's own setting:
-- the holder's decides whether anyone hears it. The payload names the table (its oid:
-- two schemas' tables of one name share the channel) and then the key.
-- The key's gate first, as lease_force_release, without waiting: a for-update holder
-- keeps it for its whole transaction (refused: it cannot be revoked), and so does an
-- acquisition of the key for a moment. Nor does it wait on the row: NOWAIT fails the
-- statement (55P03), tried again. Rows come back: 1 when a lock with holds was
-- revoked, 0 when the gate was closed (try again); none when there was nothing to
-- revoke (the caller's lookup then tells a lock with no hold left from a free key).
-- Expiry is compared as a difference, which no index serves, so that the planner
-- finds the row by its key (see lease_release).
WITH gate AS MATERIALIZED (
    SELECT pg_try_advisory_xact_lock(hashtextextended(:key, hashtext('{table}'))) AS open
), target AS MATERIALIZED (
    SELECT l.lock_key FROM "{table}" AS l, gate
    WHERE gate.open AND l.lock_key = :key
    FOR UPDATE OF l NOWAIT
), revoked AS (
    UPDATE "{table}" SET hold_count = 0
    FROM target
    WHERE "{table}".lock_key = target.lock_key
      AND locked
      AND hold_count > 0
      AND lock_owner <> ''
      AND expires_at - statement_timestamp() > INTERVAL '0'
    RETURNING "{table}".lock_key
)
SELECT 1::BIGINT FROM revoked
WHERE pg_notify('{channel}', CAST(CAST('"{table}"' AS regclass) AS oid)::TEXT || ':' || lock_key) IS NOT NULL
UNION ALL
SELECT 0::BIGINT FROM gate WHERE NOT gate.open
