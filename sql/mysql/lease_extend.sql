-- Push the expiry of a lease we still hold to :ttl_us from now on the database clock.
-- MariaDB has no UPDATE ... RETURNING, so the new expiry (microseconds since the epoch)
-- comes back in the OK packet through LAST_INSERT_ID(expr); no row matches when the
-- lease lapsed, was released or was taken.
UPDATE `{table}` SET
    lock_time = UTC_TIMESTAMP(6),
    lock_duration = :ttl_us,
    expires_at = UTC_TIMESTAMP(6) + INTERVAL :ttl_us MICROSECOND,
    hold_count = hold_count
        + 0 * LAST_INSERT_ID(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', expires_at))
WHERE lock_key = :key
  AND lock_owner = :owner
  AND fencing_token = :token
  AND locked
  AND expires_at > UTC_TIMESTAMP(6)
