-- An operator's release of the holds :keys (a JSON array of keys, shared_holds.sql
-- found them), whoever holds them, in one statement: their tokens move on, so their
-- holders' renewals, releases and fenced writes all fail from now on. One row per hold
-- released.
WITH released AS (
    UPDATE "{table}" AS l SET
        locked = FALSE,
        hold_count = 0,
        expires_at = statement_timestamp(),
        fencing_token = greatest(nextval('"{table}_fence_seq"'), l.fencing_token + 1)
    FROM jsonb_array_elements_text(CAST(:keys AS jsonb)) AS k(key)
    WHERE l.lock_key = k.key
      AND l.locked
      AND l.expires_at - statement_timestamp() > INTERVAL '0'
    RETURNING l.lock_key
)
SELECT 1::BIGINT FROM released
