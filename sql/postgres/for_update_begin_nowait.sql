-- The for-update strategy's first statement in its transaction, for a single attempt:
-- as for_update_begin, but the key's gate is tried without waiting: open is false
-- when another transaction holds it (a for-update holder, or an acquisition under
-- way), and the attempt gives up. The lock_timeout bound still matters: the row lock
-- after it waits for a fresh row another session is inserting.
SELECT bounded.before, gate.open
FROM (SELECT s.before,
             set_config('lock_timeout', greatest(:wait_us / 1000, 1)::TEXT || 'ms', TRUE) AS bound
      FROM (SELECT current_setting('lock_timeout') AS before OFFSET 0) AS s
      OFFSET 0) AS bounded
CROSS JOIN LATERAL (
    SELECT pg_try_advisory_xact_lock(hashtextextended(:key, hashtext('{table}'))) AS open
    FROM (SELECT bounded.bound) AS after_bound
    OFFSET 0) AS gate
