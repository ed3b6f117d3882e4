-- The fair strategy's steps run in a transaction that first takes the key's gate: the
-- transaction-scoped advisory lock every acquisition of the key takes (see
-- lease_acquire), without waiting. A for-update holder keeps it for its whole
-- transaction, so a fair grant never slips past one; the fair steps of one key, and
-- the acquisitions of the other strategies, run one at a time. One row when open.
SELECT 1 WHERE pg_try_advisory_xact_lock(hashtextextended(:key, hashtext('{table}')))
