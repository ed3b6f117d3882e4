-- Presence (LockerBuilder::presence): exempts a presence connection from the server's
-- timeouts, for this session only, as it opens. The connection that holds the marker
-- idles (the server then sees a dead client's socket close at once), the one that
-- waits for the marker runs one statement for as long as the holder lives: neither may
-- be ended by an idle, statement, lock or transaction timeout that an administrator
-- set for the database, the role or the server (ALTER DATABASE/ROLE ... SET, or the
-- configuration file), or the marker would be freed under a live holder. A session's
-- own setting overrides those. Each setting is set only where the server has it
-- (idle_session_timeout since PostgreSQL 14, transaction_timeout since 17).
SELECT CAST(count(set_config(name, '0', false)) AS BIGINT)
FROM unnest(ARRAY['statement_timeout', 'lock_timeout', 'idle_in_transaction_session_timeout',
                  'idle_session_timeout', 'transaction_timeout']) AS name
WHERE name IN (SELECT s.name FROM pg_settings AS s)
