-- Record in the waiter's place the grant handed to it.
UPDATE `{table}_queue` SET granted_token = :token
WHERE ticket = :ticket
  AND lock_key = :key
