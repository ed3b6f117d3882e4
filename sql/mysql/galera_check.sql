-- Before a handle's first for-update lock: is this server a node of a Galera cluster of
-- more than one node? There SELECT ... FOR UPDATE locks the row on this node only, so
-- the for-update strategy is refused. Returns the cluster size, 0 outside Galera
-- (wsrep off, or no cluster status).
SELECT CASE WHEN CAST(@@wsrep_on AS SIGNED) = 1
            THEN COALESCE((SELECT CAST(VARIABLE_VALUE AS SIGNED)
                           FROM information_schema.GLOBAL_STATUS
                           WHERE VARIABLE_NAME = 'WSREP_CLUSTER_SIZE'), 0)
            ELSE 0 END AS cluster_size
