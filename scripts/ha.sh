#!/usr/bin/env bash
# The setups beyond one server that the pooler and cluster tests run against, all on
# loopback and on ports of their own; the main servers (5432, 3306) and the fault
# tests' instances (5433, 3307) are never touched.
#
#   PgBouncer 1.18+ in transaction pooling mode on 127.0.0.1:6433, in front of the
#   main PostgreSQL's database `test` (installed with apt-get when absent).
#   A 3-node MariaDB Galera cluster on 127.0.0.1:3311, 3312, 3313 (group
#   communication on 4567/4577/4587), each node with a database `test`.
#   A PostgreSQL primary on 127.0.0.1:5434 with a synchronous standby on 5435
#   (synchronous_commit = remote_apply), which the failover test promotes.
#
#   scripts/ha.sh up | down                    all three; down also removes their
#                                              clusters and data (up builds them anew)
#   scripts/ha.sh pgbouncer up|down
#   scripts/ha.sh galera up|down
#   scripts/ha.sh standby up|down              up (re)builds the pair unless it is
#                                              healthy: primary writable, standby syncing
#   scripts/ha.sh standby failover             stop the primary at once, promote the standby
set -euo pipefail

# It creates server directories and runs servers as their system users: root's work.
if [ "$(id -u)" -ne 0 ]; then
    exec sudo -E bash "$0" "$@"
fi

PGB_PORT=6433
PGB_DIR=/var/lib/sqlock-pgbouncer

GALERA_DIR=/var/lib/sqlock-galera
GALERA_PORTS=(3311 3312 3313)
GALERA_GCOMM=(4567 4577 4587)
GALERA_IST=(4568 4578 4588)
GALERA_SST=(4444 4454 4464)

HA_PRIMARY=sqlock_ha1
HA_STANDBY=sqlock_ha2
HA_PRIMARY_PORT=5434
HA_STANDBY_PORT=5435

log() { printf 'ha: %s\n' "$*" >&2; }

# Debian packages, with the package lists fetched once first (a new machine may have
# none yet).
apt_updated=""
apt_install() {
    if [ -z "$apt_updated" ]; then
        apt-get update -qq
        apt_updated=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null
}

wait_for() {
    local tries=$1
    shift
    for _ in $(seq 1 "$tries"); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.25
    done
    return 1
}

pg_version() { ls /etc/postgresql | sort -V | tail -n 1; }

# --- PgBouncer ------------------------------------------------------------------

pgbouncer_up() {
    if ! command -v pgbouncer >/dev/null && [ ! -x /usr/sbin/pgbouncer ]; then
        log "installing pgbouncer"
        apt_install pgbouncer
    fi
    mkdir -p "$PGB_DIR"
    cat >"$PGB_DIR/pgbouncer.ini" <<EOF
[databases]
test = host=127.0.0.1 port=5432 dbname=test

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $PGB_PORT
unix_socket_dir =
auth_type = trust
auth_file = $PGB_DIR/userlist.txt
pool_mode = transaction
default_pool_size = 20
max_client_conn = 500
ignore_startup_parameters = extra_float_digits
pidfile = $PGB_DIR/pgbouncer.pid
logfile = $PGB_DIR/pgbouncer.log
EOF
    echo '"postgres" ""' >"$PGB_DIR/userlist.txt"
    chown -R postgres:postgres "$PGB_DIR"
    if ! pgbouncer_ready; then
        su postgres -s /bin/sh -c "/usr/sbin/pgbouncer -d $PGB_DIR/pgbouncer.ini"
        wait_for 80 pgbouncer_ready || {
            tail -n 20 "$PGB_DIR/pgbouncer.log" >&2
            return 1
        }
    fi
    log "PgBouncer (transaction pooling) on 127.0.0.1:$PGB_PORT"
}

pgbouncer_ready() { psql -h 127.0.0.1 -p "$PGB_PORT" -U postgres -d test -tAc "SELECT 1" 2>/dev/null | grep -q 1; }

pgbouncer_down() {
    if [ -f "$PGB_DIR/pgbouncer.pid" ]; then
        kill "$(cat "$PGB_DIR/pgbouncer.pid")" 2>/dev/null || true
        rm -f "$PGB_DIR/pgbouncer.pid"
    fi
}

# --- Galera -----------------------------------------------------------------------

galera_sock() { echo "$GALERA_DIR/node$1/mysqld.sock"; }

galera_sql() {
    local n=$1
    shift
    mariadb --socket="$(galera_sock "$n")" -uroot -N -B -e "$*"
}

galera_state() { galera_sql "$1" "SHOW STATUS LIKE 'wsrep_local_state_comment'" | awk '{print $2}'; }

galera_synced() { [ "$(galera_state "$1")" = Synced ]; }

galera_config() {
    local n=$1 i=$(($1 - 1)) dir="$GALERA_DIR/node$1"
    local peers
    peers=$(printf '127.0.0.1:%s,' "${GALERA_GCOMM[@]}")
    cat >"$dir.cnf" <<EOF
[mariadbd]
user = mysql
datadir = $dir/data
socket = $dir/mysqld.sock
pid-file = $dir/mysqld.pid
log-error = $dir/error.log
port = ${GALERA_PORTS[$i]}
bind-address = 127.0.0.1
skip-name-resolve
innodb_buffer_pool_size = 64M
binlog_format = ROW
default_storage_engine = InnoDB
innodb_autoinc_lock_mode = 2
wsrep_on = ON
wsrep_provider = /usr/lib/galera/libgalera_smm.so
wsrep_cluster_name = sqlock_galera
wsrep_cluster_address = gcomm://${peers%,}
wsrep_node_name = node$n
wsrep_node_address = 127.0.0.1:${GALERA_GCOMM[$i]}
wsrep_provider_options = "gmcast.listen_addr=tcp://127.0.0.1:${GALERA_GCOMM[$i]};ist.recv_addr=127.0.0.1:${GALERA_IST[$i]}"
wsrep_sst_receive_address = 127.0.0.1:${GALERA_SST[$i]}
wsrep_sst_method = rsync
EOF
}

galera_start() {
    local n=$1 dir="$GALERA_DIR/node$1"
    shift
    if galera_synced "$n" 2>/dev/null; then return 0; fi
    start-stop-daemon --start --background --chuid mysql --pidfile "$dir/mysqld.pid" \
        --exec /usr/sbin/mariadbd -- --defaults-file="$dir.cnf" "$@"
    wait_for 240 galera_synced "$n" || {
        tail -n 30 "$dir/error.log" >&2
        return 1
    }
}

galera_up() {
    if ! command -v rsync >/dev/null; then
        log "installing rsync (the Galera state transfer)"
        apt_install rsync
    fi
    [ -f /usr/lib/galera/libgalera_smm.so ] || {
        log "installing galera-4"
        apt_install galera-4
    }
    mkdir -p "$GALERA_DIR"
    chown mysql:mysql "$GALERA_DIR"
    for n in 1 2 3; do
        mkdir -p "$GALERA_DIR/node$n/data"
        chown mysql:mysql "$GALERA_DIR/node$n" "$GALERA_DIR/node$n/data"
        galera_config "$n"
    done
    if galera_synced 1 2>/dev/null && galera_synced 2 2>/dev/null && galera_synced 3 2>/dev/null; then
        log "Galera cluster already up"
    else
        galera_down
        if [ ! -d "$GALERA_DIR/node1/data/mysql" ]; then
            # A cluster that never got synchronised starts over from nothing.
            rm -rf "${GALERA_DIR:?}"/node[23]/data/*
            log "creating the Galera cluster in $GALERA_DIR"
            mariadb-install-db --no-defaults --user=mysql --datadir="$GALERA_DIR/node1/data" \
                --auth-root-authentication-method=normal --skip-test-db >/dev/null
        fi
        # Node 1 starts a new cluster (a cluster stopped as a whole has no running member
        # to join); nodes 2 and 3 join it and take its state by rsync.
        sed -i 's/^safe_to_bootstrap: 0/safe_to_bootstrap: 1/' "$GALERA_DIR/node1/data/grastate.dat" 2>/dev/null || true
        galera_start 1 --wsrep-new-cluster
        galera_start 2
        galera_start 3
    fi
    galera_sql 1 "
        CREATE USER IF NOT EXISTS 'root'@'127.0.0.1';
        GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
        CREATE DATABASE IF NOT EXISTS test;"
    log "Galera cluster of $(galera_sql 1 "SHOW STATUS LIKE 'wsrep_cluster_size'" | awk '{print $2}') nodes on 127.0.0.1:${GALERA_PORTS[*]}"
}

galera_down() {
    # Node 1 last: it then holds the latest state and may start the cluster again.
    for n in 3 2 1; do
        local pid="$GALERA_DIR/node$n/mysqld.pid"
        if [ -f "$pid" ] && kill -0 "$(cat "$pid")" 2>/dev/null; then
            kill "$(cat "$pid")"
            wait_for 240 bash -c "! kill -0 $(cat "$pid") 2>/dev/null" || true
        fi
    done
}

# --- PostgreSQL primary and synchronous standby ----------------------------------------

ha_ctl() { pg_ctlcluster --skip-systemctl-redirect "$(pg_version)" "$@"; }

ha_psql() { psql -h 127.0.0.1 -p "$1" -U postgres -tAc "$2"; }

ha_healthy() {
    [ "$(ha_psql $HA_PRIMARY_PORT "SELECT pg_is_in_recovery()")" = f ] &&
        [ "$(ha_psql $HA_STANDBY_PORT "SELECT pg_is_in_recovery()")" = t ] &&
        [ "$(ha_psql $HA_PRIMARY_PORT "SELECT sync_state FROM pg_stat_replication")" = sync ]
}

standby_down() {
    ha_ctl "$HA_STANDBY" stop -m fast >/dev/null 2>&1 || true
    ha_ctl "$HA_PRIMARY" stop -m fast >/dev/null 2>&1 || true
}

standby_up() {
    local v
    v=$(pg_version)
    if ha_healthy 2>/dev/null; then
        log "primary on $HA_PRIMARY_PORT with synchronous standby on $HA_STANDBY_PORT already up"
        return 0
    fi
    # Start from nothing: after a failover the old primary is behind the promoted one.
    standby_down
    for c in "$HA_PRIMARY" "$HA_STANDBY"; do
        if [ -d "/etc/postgresql/$v/$c" ]; then pg_dropcluster "$v" "$c" >/dev/null 2>&1 || true; fi
        # A run killed half way may leave either folder without the other.
        rm -rf "/etc/postgresql/$v/$c" "/var/lib/postgresql/$v/$c"
    done
    log "creating primary $HA_PRIMARY on port $HA_PRIMARY_PORT"
    pg_createcluster "$v" "$HA_PRIMARY" -p "$HA_PRIMARY_PORT" >/dev/null
    local conf="/etc/postgresql/$v/$HA_PRIMARY"
    sed -i '1i local all all trust\nhost all all 127.0.0.1/32 trust\nhost replication all 127.0.0.1/32 trust' \
        "$conf/pg_hba.conf"
    cat >"$conf/conf.d/sqlock-ha.conf" <<EOF
listen_addresses = '127.0.0.1'
wal_level = replica
max_wal_senders = 5
shared_buffers = 32MB
EOF
    ha_ctl "$HA_PRIMARY" start
    wait_for 120 pg_isready -q -h 127.0.0.1 -p "$HA_PRIMARY_PORT"
    ha_psql $HA_PRIMARY_PORT "CREATE DATABASE test" >/dev/null

    log "creating standby $HA_STANDBY on port $HA_STANDBY_PORT"
    pg_createcluster "$v" "$HA_STANDBY" -p "$HA_STANDBY_PORT" >/dev/null
    cp "$conf/pg_hba.conf" "/etc/postgresql/$v/$HA_STANDBY/pg_hba.conf"
    cp "$conf/conf.d/sqlock-ha.conf" "/etc/postgresql/$v/$HA_STANDBY/conf.d/"
    local data="/var/lib/postgresql/$v/$HA_STANDBY"
    rm -rf "${data:?}"/*
    su postgres -c "pg_basebackup -h 127.0.0.1 -p $HA_PRIMARY_PORT -U postgres -D $data -R -X stream -c fast \
        -d 'application_name=$HA_STANDBY'" >/dev/null
    ha_ctl "$HA_STANDBY" start
    wait_for 120 pg_isready -q -h 127.0.0.1 -p "$HA_STANDBY_PORT"

    # Synchronous only once the standby streams: before, every commit would wait for it.
    cat >>"$conf/conf.d/sqlock-ha.conf" <<EOF
synchronous_standby_names = 'FIRST 1 ($HA_STANDBY)'
synchronous_commit = remote_apply
EOF
    ha_ctl "$HA_PRIMARY" reload
    wait_for 120 ha_healthy || {
        log "the standby did not become synchronous"
        return 1
    }
    log "primary on 127.0.0.1:$HA_PRIMARY_PORT, synchronous standby (remote_apply) on 127.0.0.1:$HA_STANDBY_PORT"
}

standby_failover() {
    ha_ctl "$HA_PRIMARY" stop -m immediate
    ha_ctl "$HA_STANDBY" promote
    wait_for 120 bash -c "[ \"\$(psql -h 127.0.0.1 -p $HA_STANDBY_PORT -U postgres -tAc 'SELECT pg_is_in_recovery()')\" = f ]"
    log "primary stopped; standby on $HA_STANDBY_PORT promoted"
}

case ${1:-} in
up)
    pgbouncer_up
    galera_up
    standby_up
    ;;
down)
    pgbouncer_down
    galera_down
    standby_down
    # Nothing left behind: the clusters, their data and PgBouncer's files.
    v=$(pg_version)
    for c in "$HA_PRIMARY" "$HA_STANDBY"; do
        if [ -d "/etc/postgresql/$v/$c" ]; then
            pg_dropcluster --stop "$v" "$c" >/dev/null 2>&1 || true
        fi
        # pg_dropcluster leaves a configuration folder holding files it did not make,
        # and a cluster whose configuration is gone keeps its data folder.
        rm -rf "/etc/postgresql/$v/$c" "/var/lib/postgresql/$v/$c"
    done
    rm -rf "$GALERA_DIR" "$PGB_DIR"
    ;;
pgbouncer | galera)
    "${1}_${2:?up or down}"
    ;;
standby)
    "standby_${2:?up, down or failover}"
    ;;
*)
    echo "usage: $0 up|down | pgbouncer up|down | galera up|down | standby up|down|failover" >&2
    exit 64
    ;;
esac
