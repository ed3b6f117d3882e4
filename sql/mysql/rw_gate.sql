-- A read hold's gate: the key's fence bucket, locked shared (readers share it), for at
-- most a second. Every other acquisition of the key locks the bucket exclusively for
-- its statement (skipping it when locked), so a read's check and grant never run
-- beside a grant of the key. A row when taken; a lock wait timeout otherwise.
SET STATEMENT innodb_lock_wait_timeout = 1 FOR
SELECT bucket FROM `{table}_fence` WHERE bucket = CRC32(:key) % 1024 LOCK IN SHARE MODE
