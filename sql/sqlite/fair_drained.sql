-- SQLite keeps no queued flag on the row: its writers run one at a time and each
-- reads the latest commit, so lease_acquire and fair_release read the queue itself.
-- This statement, which changes nothing, is never sent (Backend::QUEUED_FLAG); it is
-- here because every server has the fair strategy's statements.
SELECT 0 WHERE :key IS NULL
