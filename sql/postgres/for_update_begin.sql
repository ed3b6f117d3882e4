-- The for-update strategy's first statement in its transaction, when it may wait:
-- bound how long the transaction's lock waits may last, to :wait_us (at least a
-- millisecond: zero would mean no limit), then take the key's gate, the
-- transaction-scoped advisory lock every acquisition of the key takes (see
-- lease_acquire), waiting at most that long. Holding the gate for the whole
-- transaction is what makes lease and insert attempts on the key see it as held,
-- without waiting on the row lock.
-- Returns the lock_timeout it replaced, which for_update_grant puts back, so that no
-- bound made to take the lock is in force for the holder's own statements. Each step
-- reads the one before it (OFFSET 0 keeps them apart), so they run in this order.
SELECT bounded.before, gate.open
FROM (SELECT s.before,
             set_config('lock_timeout', greatest(:wait_us / 1000, 1)::TEXT || 'ms', TRUE) AS bound
      FROM (SELECT current_setting('lock_timeout') AS before OFFSET 0) AS s
      OFFSET 0) AS bounded
CROSS JOIN LATERAL (
    SELECT TRUE AS open, pg_advisory_xact_lock(hashtextextended(:key, hashtext('{table}')))
    FROM (SELECT bounded.bound) AS after_bound
    OFFSET 0) AS gate
