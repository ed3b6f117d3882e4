-- The for-update strategy, MariaDB: does the key have a row yet? A plain read outside
-- any transaction, which locks nothing. A locking read of a missing key would take a gap
-- lock and, for as long as its transaction lasted, keep out an acquisition of any
-- neighbouring key (lease and insert acquisitions never wait on a lock: they would
-- answer "busy" for a free key). Sent before the locking transaction, so that the
-- transaction locks only a row that exists: a record lock, no gap.
SELECT fencing_token FROM `{table}` WHERE lock_key = :key
