-- The watchdog's tick: renew, in one statement, every lease in :batch (a JSON array of
-- [key, token] pairs; [key, token, name] for a hold of a name in shared mode) that
-- :owner still holds with that token, to :ttl_us from now. The keys that come back
-- were renewed; any other key of the batch is lost.
-- A renewal never shortens a lease: after an extension or a re-entry with a longer TTL
-- the later expiry stays, so the holder's own count of its lease stays true.
-- A lease with no hold left is never renewed: an operator revoked it (force_release:
-- its holder is to give it back), or an at-least hold keeps it after its release. Its
-- holder learns of it as of any lease lost, and the row lapses at its expiry.
--
-- A hold of a name in shared mode (a read ':name@read:<owner>', a permit
-- 'semaphore:<name>#<slot>') comes with its name: the name's row must never expire
-- before the hold. So the names of the batch's live holds are pushed first (parents,
-- below), each as far as its holds, while live and held in shared mode or by :owner
-- (a downgrade's name, held by its writer); and a hold is renewed only when its name
-- was pushed by this very statement, or is itself a lease of the batch that this
-- statement renews (a downgrade's write side: one statement updates a row once). A
-- name pushed for a hold that turns out lost only stays held a little longer.
-- Rows are locked holds first, then their names, as every statement that locks a hold
-- and its name does (a hold's release, extension or grant, the write side's release):
-- the batch's live holds are locked (holds, in key order) before any name is, the
-- names to push being read from them as one array, which is complete before the
-- parents' update reads its first row; the batch's other leases last, by the final
-- update. In the opposite order a renewal and a release of one hold would wait for
-- each other until the server broke the deadlock.
WITH b AS MATERIALIZED (
    SELECT v->>0 AS k, (v->>1)::BIGINT AS t, COALESCE(v->>2, '') AS p
    FROM jsonb_array_elements(:batch::jsonb) AS j(v)
), holds AS MATERIALIZED (
    SELECT b.p FROM b JOIN "{table}" AS c ON c.lock_key = b.k
    WHERE b.p <> ''
      AND c.fencing_token = b.t
      AND c.lock_owner = :owner
      AND c.locked
      AND c.hold_count > 0
      AND c.expires_at > statement_timestamp()
    ORDER BY c.lock_key
    FOR UPDATE OF c
), parents AS (
    UPDATE "{table}" AS n SET
        lock_time = statement_timestamp(),
        lock_duration = greatest(:ttl_us,
            (extract(epoch FROM n.expires_at - statement_timestamp()) * 1000000)::BIGINT),
        expires_at = greatest(n.expires_at,
            statement_timestamp() + :ttl_us * INTERVAL '1 microsecond')
    WHERE n.lock_key = ANY (ARRAY(
            SELECT holds.p FROM holds WHERE holds.p NOT IN (SELECT k FROM b)))
      AND (n.lock_owner = '' OR n.lock_owner = :owner)
      AND n.locked
      AND n.hold_count > 0
      AND n.expires_at > statement_timestamp()
    RETURNING n.lock_key
)
UPDATE "{table}" AS l SET
    lock_time = statement_timestamp(),
    lock_duration = greatest(:ttl_us,
        (extract(epoch FROM l.expires_at - statement_timestamp()) * 1000000)::BIGINT),
    expires_at = greatest(l.expires_at,
        statement_timestamp() + :ttl_us * INTERVAL '1 microsecond')
FROM b
WHERE l.lock_key = b.k
  AND l.fencing_token = b.t
  AND l.lock_owner = :owner
  AND l.locked
  AND l.hold_count > 0
  AND l.expires_at > statement_timestamp()
  AND (b.p = ''
       OR b.p IN (SELECT lock_key FROM parents)
       OR EXISTS (SELECT 1 FROM b AS w JOIN "{table}" AS n ON n.lock_key = w.k
                  WHERE w.k = b.p
                    AND n.fencing_token = w.t
                    AND n.lock_owner = :owner
                    AND n.locked
                    AND n.hold_count > 0
                    AND n.expires_at > statement_timestamp()))
RETURNING l.lock_key
