-- sqlock: presence for the fair strategy's waiters (LockerBuilder::presence) for
-- MariaDB.
--
-- A waiter with presence records the name of its presence marker on its place, as a
-- lease records it on its row (see 20261125000000_add_sqlock_presence.sql), and a
-- handoff copies it onto the grant it hands the waiter: a grant handed to a waiter
-- whose process died is then the next waiter's at once, as a dead holder's lease is,
-- rather than when the dead waiter's place lapses. NULL: the waiter has no presence.
ALTER TABLE `sqlock_locks_queue` ADD COLUMN IF NOT EXISTS presence_key VARCHAR(64) NULL;
