-- Presence (LockerBuilder::presence): exempts a presence connection from the server's
-- timeouts, for this session only, as it opens. The connection that holds the marker
-- idles (the server then sees a dead client's socket close at once), the one that
-- waits for the marker runs one statement for as long as the holder lives: neither may
-- be ended by wait_timeout (an idle connection), interactive_timeout or
-- max_statement_time set for the server, or the marker would be freed under a live
-- holder. 31536000 s (a year) is the largest idle timeout MariaDB takes.
SET SESSION wait_timeout = 31536000, interactive_timeout = 31536000, max_statement_time = 0
