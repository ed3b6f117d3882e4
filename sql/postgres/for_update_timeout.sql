-- The for-update strategy: bound how long this transaction's lock waits may last,
-- NOWAIT attempts included (a fresh row another session inserts is waited on), to
-- :wait_us (at least a millisecond: zero would mean no limit). Transaction-local, so
-- it ends with the transaction and a pooled connection keeps its own settings.
SELECT set_config('lock_timeout', greatest(:wait_us / 1000, 1)::TEXT || 'ms', TRUE)
