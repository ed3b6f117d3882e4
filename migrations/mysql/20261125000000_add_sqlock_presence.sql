-- sqlock: presence (LockerBuilder::presence) for MariaDB.
--
-- A lease taken by a handle with presence records the name of its presence marker: a
-- user-level lock (GET_LOCK) that the handle keeps on a connection of its own. While
-- that connection lives the name is in use; when the holder's process dies the server
-- ends the connection and frees it, and an acquisition may then take the lease at
-- once, with a new fencing token, without waiting for its expiry. NULL: the holder has
-- no presence, and the lease lasts until its expiry.
ALTER TABLE `sqlock_locks` ADD COLUMN IF NOT EXISTS presence_key VARCHAR(64) NULL;
