-- The lock table's identity as the notifications name it: its oid, found by its name
-- along the listener's search_path (the application's, whose connect options the
-- listener copies), as the statements that notify find it. NULL while the table does
-- not exist.
SELECT CAST(CAST(to_regclass('"{table}"') AS oid) AS BIGINT)
