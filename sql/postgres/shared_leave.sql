-- In the transaction that freed a hold of a name in shared mode (shared_release.sql,
-- or an operator's shared_drop.sql): the name :key, held in shared mode of the kind
-- :strategy ('read' or 'semaphore'), counts one hold less, and is free once it counts
-- none (locked = FALSE, expiring now; the row stays for reuse until swept). A name not
-- held in that mode (a downgrade's name, held by its writer; a name that lapsed) is
-- left as it is: its holder's own release or its expiry frees it.
UPDATE "{table}" SET
    locked = hold_count > 1,
    expires_at = CASE WHEN hold_count > 1 THEN expires_at ELSE statement_timestamp() END,
    hold_count = hold_count - 1
WHERE lock_key = :key
  AND lock_owner = ''
  AND lock_strategy = :strategy
  AND locked
  AND hold_count > 0
  AND expires_at - statement_timestamp() > INTERVAL '0'
