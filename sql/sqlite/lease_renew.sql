-- The watchdog's tick: renew, in one statement, every lease in :batch (a JSON array of
-- [key, token] pairs; [key, token, name] for a hold of a name in shared mode) that
-- :owner still holds with that token, to :ttl_us from now. The batch's keys that come
-- back were renewed; any other key of the batch is lost.
-- A renewal never shortens a lease: after an extension or a re-entry with a longer TTL
-- the later expiry stays, so the holder's own count of its lease stays true.
-- A lease with no hold left is never renewed: an operator revoked it (force_release:
-- its holder is to give it back), or an at-least hold keeps it after its release. Its
-- holder learns of it as of any lease lost, and the row lapses at its expiry. A name
-- held in shared mode counts its holds, so it has some while it is live.
--
-- A hold of a name in shared mode (a read ':name@read:<owner>', a permit
-- 'semaphore:<name>#<slot>') comes with its name: the name's row must never expire
-- before the hold. So the statement renews two sets of rows: the batch's leases (b),
-- a hold only while its name is live and held in shared mode or by :owner (a
-- downgrade's name, held by its writer); and the names of the batch's live holds that
-- are no lease of the batch themselves (x, with no token), pushed as far as their
-- holds. Each test reads what no assignment of the statement changes (who holds a
-- row, whether it is live), so a hold is renewed exactly when its name is pushed too.
-- The pushed names come back as well; the caller keeps the batch's keys.
-- Times are microseconds since the Unix epoch.
WITH b AS (
    SELECT json_extract(value, '$[0]') AS k, json_extract(value, '$[1]') AS t,
           coalesce(json_extract(value, '$[2]'), '') AS p
    FROM json_each(:batch)
), x AS (
    SELECT k, t, p FROM b
    UNION ALL
    SELECT DISTINCT p, NULL, '' FROM b WHERE p <> '' AND p NOT IN (SELECT k FROM b)
)
UPDATE "{table}" AS l SET
    lock_time = n.now,
    lock_duration = max(:ttl_us, l.expires_at - n.now),
    expires_at = max(l.expires_at, n.now + :ttl_us)
FROM x,
     (SELECT CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER) AS now) AS n
WHERE l.lock_key = x.k
  AND l.locked
  AND l.hold_count > 0
  AND l.expires_at > n.now
  AND CASE WHEN x.t IS NULL
      THEN (l.lock_owner = '' OR l.lock_owner = :owner)
           AND EXISTS (SELECT 1 FROM b AS h JOIN "{table}" AS c ON c.lock_key = h.k
                       WHERE h.p = l.lock_key
                         AND c.fencing_token = h.t
                         AND c.lock_owner = :owner
                         AND c.locked
                         AND c.hold_count > 0
                         AND c.expires_at > n.now)
      ELSE l.fencing_token = x.t
           AND l.lock_owner = :owner
           AND (x.p = ''
                OR EXISTS (SELECT 1 FROM "{table}" AS q
                           WHERE q.lock_key = x.p
                             AND q.locked
                             AND q.hold_count > 0
                             AND q.expires_at > n.now
                             AND (q.lock_owner = '' OR q.lock_owner = :owner)))
      END
RETURNING lock_key
