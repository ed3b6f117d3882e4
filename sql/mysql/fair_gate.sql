-- The fair strategy's steps run in a transaction that first locks the key's fence
-- bucket (see the migration), which every acquisition of the key locks too: the fair
-- steps of one key, and the acquisitions of the other strategies, run one at a time.
-- A bucket is held for the length of one statement or one fair step: a second at most
-- of waiting, then contention (tried again). One matched row when open.
SET STATEMENT innodb_lock_wait_timeout = 1 FOR
UPDATE `{table}_fence` SET bucket = bucket WHERE bucket = CRC32(:key) % 1024
