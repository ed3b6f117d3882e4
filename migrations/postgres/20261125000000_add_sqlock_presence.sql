-- sqlock: presence (LockerBuilder::presence) for PostgreSQL.
--
-- A lease taken by a handle with presence records the key of its presence marker: a
-- session advisory lock (two-key form, first key 1936813168) that the handle keeps on
-- a connection of its own. While that session lives the marker is held; when the
-- holder's process dies the server ends the session and frees it, and an acquisition
-- may then take the lease at once, with a new fencing token, without waiting for its
-- expiry. NULL: the holder has no presence, and the lease lasts until its expiry.
ALTER TABLE "sqlock_locks" ADD COLUMN IF NOT EXISTS presence_key BIGINT;
