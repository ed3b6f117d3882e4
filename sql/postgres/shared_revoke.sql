-- An operator's revocation of the holds :keys (a JSON array of keys: the reads and
-- permits of a name, shared_holds.sql found them; or one read or permit), whoever holds
-- them, in one statement: as lease_revoke does to a lock, each row keeps its owner,
-- token and expiry and loses its holds, so its holder's renewals and extensions fail
-- and its release frees it at once (and counts its name one hold less, as any release
-- of it does). A name's own row (no owner), which counts those holds, is left as it
-- is: each hold's release counts it down. Each holder is told at once, as by
-- lease_revoke: pg_notify names its hold's key on the table's release channel. One
-- row per hold revoked.
WITH revoked AS (
    UPDATE "{table}" AS l SET hold_count = 0
    FROM jsonb_array_elements_text(CAST(:keys AS jsonb)) AS k(key)
    WHERE l.lock_key = k.key
      AND l.lock_owner <> ''
      AND l.locked
      AND l.hold_count > 0
      AND l.expires_at - statement_timestamp() > INTERVAL '0'
    RETURNING l.lock_key
)
SELECT 1::BIGINT FROM revoked
WHERE pg_notify('{channel}', CAST(CAST('"{table}"' AS regclass) AS oid)::TEXT || ':' || lock_key) IS NOT NULL
