-- The for-update strategy's keepalive: a round trip on the connection that holds the
-- lock's transaction, so that a connection ended by the server is noticed, and an
-- idle-in-transaction timeout does not end it.
SELECT 1
