#!/usr/bin/env bash
# Server instances of the fault tests' own, which those tests stop and start: a second
# PostgreSQL cluster on 127.0.0.1:5433 and a second MariaDB on 127.0.0.1:3307, each
# with a database `test`. The main servers (5432, 3306) are never touched.
# The scheduled-sweep tests need a scheduler inside each: the PostgreSQL cluster loads
# pg_cron (Debian's postgresql-<version>-cron, installed here when missing) with its
# jobs run from database `test`, and the MariaDB instance runs with event_scheduler=ON.
# Both run under libfaketime (Debian's `faketime`, installed here when missing), with
# their clock offset read from $CLOCK_FILE: "+0" (the true time) unless a test is
# moving it. The partition tests cut connections with nft (Debian's `nftables`, also
# installed here); `up` deletes a rule table such a test may have left behind.
#
#   scripts/fault-db.sh up                  create (first time) and start both
#   scripts/fault-db.sh down                stop both, and remove their data (up makes
#                                           them anew)
#   scripts/fault-db.sh postgres stop|start
#   scripts/fault-db.sh postgres crash      stop at once (-m immediate): nothing is
#                                           flushed or checkpointed; the next start
#                                           recovers from the WAL on disk
#   scripts/fault-db.sh mariadb stop|start
#   scripts/fault-db.sh mariadb crash       SIGKILL the server: no shutdown
#   scripts/fault-db.sh mariadb recoveries  how often it recovered from its redo log
set -euo pipefail

PG_PORT=5433
MY_PORT=3307
PG_MAX_CONNECTIONS=400
MY_MAX_CONNECTIONS=600
PG_CLUSTER=sqlock_fault
MY_DIR=/var/lib/sqlock-fault-mariadb
MY_SOCK=$MY_DIR/mysqld.sock
MY_PID=$MY_DIR/mysqld.pid
# The fault servers' clock offset, for libfaketime: "+0", "+5", "-3" (seconds).
CLOCK_DIR=/var/lib/sqlock-fault-clock
CLOCK_FILE=$CLOCK_DIR/offset
FAKETIME_DIR=/usr/lib/x86_64-linux-gnu/faketime
# The nft table the partition tests put their drop rules in.
NFT_TABLE=sqlock_fault

log() { printf 'fault-db: %s\n' "$*" >&2; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

wait_for() {
    for _ in $(seq 1 120); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.25
    done
    return 1
}

# Installs the Debian packages the fault tests need, when missing.
tools() {
    local missing=()
    [ -e "$FAKETIME_DIR/libfaketimeMT.so.1" ] || missing+=(faketime libfaketime)
    command -v nft >/dev/null 2>&1 || [ -x /usr/sbin/nft ] || missing+=(nftables)
    if [ ${#missing[@]} -gt 0 ]; then
        log "installing ${missing[*]}"
        as_root apt-get update -qq
        DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
    mkdir -p "$CLOCK_DIR"
    chmod 755 "$CLOCK_DIR"
    # The true time, whatever a test that stopped halfway left here. Written whole.
    printf '+0\n' >"$CLOCK_FILE.tmp"
    chmod 644 "$CLOCK_FILE.tmp"
    mv -f "$CLOCK_FILE.tmp" "$CLOCK_FILE"
    /usr/sbin/nft delete table inet "$NFT_TABLE" 2>/dev/null || true
}

# The environment both fault servers start with: libfaketime reading the offset file
# on every clock call (no cache), the monotonic clock left true.
faketime_env() {
    printf '%s\n' "LD_PRELOAD=$FAKETIME_DIR/$1" "FAKETIME_TIMESTAMP_FILE=$CLOCK_FILE" \
        "FAKETIME_NO_CACHE=1" "FAKETIME_DONT_FAKE_MONOTONIC=1"
}

pg_version() { ls /etc/postgresql | sort -V | tail -n 1; }

postgres() {
    local v
    v=$(pg_version)
    case $1 in
    create)
        # A configuration left without its data (a removal cut short) is removed first.
        if [ -d "/etc/postgresql/$v/$PG_CLUSTER" ] &&
            [ ! -e "/var/lib/postgresql/$v/$PG_CLUSTER/PG_VERSION" ]; then
            rm -rf "/etc/postgresql/$v/$PG_CLUSTER"
        fi
        if [ ! -d "/etc/postgresql/$v/$PG_CLUSTER" ]; then
            log "creating PostgreSQL cluster $PG_CLUSTER on port $PG_PORT"
            pg_createcluster "$v" "$PG_CLUSTER" -p "$PG_PORT" >/dev/null
            sed -i '1i local all all trust\nhost all all 127.0.0.1/32 trust' \
                "/etc/postgresql/$v/$PG_CLUSTER/pg_hba.conf"
        fi
        if [ ! -e "/usr/share/postgresql/$v/extension/pg_cron.control" ]; then
            log "installing pg_cron for PostgreSQL $v"
            as_root apt-get update -qq
            DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq \
                "postgresql-$v-cron" >/dev/null
        fi
        # pg_cron runs its jobs from `test`, in background workers (no connection
        # back through pg_hba needed). Loaded at start: a running cluster that does
        # not load it yet is restarted by `up`.
        local conf=/etc/postgresql/$v/$PG_CLUSTER/conf.d/sqlock-cron.conf
        if [ ! -e "$conf" ]; then
            printf '%s\n' "shared_preload_libraries = 'pg_cron'" \
                "cron.database_name = 'test'" "cron.use_background_workers = on" >"$conf"
        fi
        # The fault workload runs every primitive with and without presence at once:
        # more sessions than the default 100.
        printf '%s\n' "max_connections = $PG_MAX_CONNECTIONS" \
            >"/etc/postgresql/$v/$PG_CLUSTER/conf.d/sqlock-connections.conf"
        # pg_ctlcluster starts the server with this environment (its lines read
        # `NAME = 'value'`).
        faketime_env libfaketime.so.1 | sed "s/=\(.*\)/ = '\1'/" \
            >"/etc/postgresql/$v/$PG_CLUSTER/environment"
        ;;
    start)
        pg_ctlcluster --skip-systemctl-redirect "$v" "$PG_CLUSTER" start >/dev/null 2>&1 || true
        wait_for pg_isready -q -h 127.0.0.1 -p "$PG_PORT"
        ;;
    stop)
        pg_ctlcluster --skip-systemctl-redirect "$v" "$PG_CLUSTER" stop -m fast 2>/dev/null || true
        ;;
    crash)
        pg_ctlcluster --skip-systemctl-redirect "$v" "$PG_CLUSTER" stop -m immediate 2>/dev/null || true
        ;;
    esac
}

mariadb_ping() { mariadb-admin --socket="$MY_SOCK" -uroot ping; }

mariadb() {
    case $1 in
    create)
        if [ ! -d "$MY_DIR/mysql" ]; then
            log "creating MariaDB instance in $MY_DIR on port $MY_PORT"
            mkdir -p "$MY_DIR"
            chown mysql:mysql "$MY_DIR"
            mariadb-install-db --no-defaults --user=mysql --datadir="$MY_DIR" \
                --auth-root-authentication-method=normal --skip-test-db >/dev/null
        fi
        ;;
    start)
        if ! mariadb_ping >/dev/null 2>&1; then
            # shellcheck disable=SC2046 # one VAR=value word per line
            env $(faketime_env libfaketimeMT.so.1) \
                start-stop-daemon --start --background --pidfile "$MY_PID" --exec /usr/sbin/mariadbd -- \
                --no-defaults --user=mysql --datadir="$MY_DIR" --port="$MY_PORT" \
                --bind-address=127.0.0.1 --socket="$MY_SOCK" --pid-file="$MY_PID" \
                --skip-name-resolve --innodb-buffer-pool-size=32M --log-error="$MY_DIR/error.log" \
                --event-scheduler=ON --max-connections="$MY_MAX_CONNECTIONS"
            wait_for mariadb_ping
        fi
        # Also for an instance started by an earlier version of this script.
        command mariadb --socket="$MY_SOCK" -uroot -e "
            SET GLOBAL event_scheduler = ON;
            CREATE USER IF NOT EXISTS 'root'@'127.0.0.1';
            GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
            CREATE DATABASE IF NOT EXISTS test;"
        ;;
    stop)
        if mariadb_ping >/dev/null 2>&1; then
            mariadb-admin --socket="$MY_SOCK" -uroot shutdown
        fi
        ;;
    crash)
        # SIGKILL: no shutdown, nothing flushed beyond what each commit flushed.
        local pid
        pid=$(cat "$MY_PID" 2>/dev/null || true)
        if [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null; then
            wait_for test ! -e "/proc/$pid"
        fi
        rm -f "$MY_PID"
        ;;
    recoveries)
        # How often the instance recovered from its redo log at a start (after a crash).
        grep -c 'Starting crash recovery' "$MY_DIR/error.log" 2>/dev/null || true
        ;;
    esac
}

# Whether the running server of pid $1 has libfaketime loaded.
faked() { [ -n "$1" ] && grep -q libfaketime "/proc/$1/maps" 2>/dev/null; }

pg_pid() { head -n 1 "/var/lib/postgresql/$(pg_version)/$PG_CLUSTER/postmaster.pid" 2>/dev/null || true; }

case ${1:-} in
up)
    tools
    postgres create
    postgres start
    if [ "$(psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -tAc "SHOW shared_preload_libraries")" != pg_cron ] ||
        [ "$(psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -tAc "SHOW max_connections")" != "$PG_MAX_CONNECTIONS" ] ||
        ! faked "$(pg_pid)"; then
        log "restarting PostgreSQL cluster $PG_CLUSTER to load pg_cron and libfaketime and its settings"
        postgres stop
        postgres start
    fi
    psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'test'" | grep -q 1 ||
        psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -qc "CREATE DATABASE test"
    psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -d test -qc "CREATE EXTENSION IF NOT EXISTS pg_cron"
    mariadb create
    if mariadb_ping >/dev/null 2>&1 && { ! faked "$(cat "$MY_PID" 2>/dev/null)" ||
        [ "$(command mariadb --socket="$MY_SOCK" -uroot -N -e "SELECT @@max_connections")" != "$MY_MAX_CONNECTIONS" ]; }; then
        log "restarting the fault MariaDB to load libfaketime and its settings"
        mariadb stop
        wait_for test ! -e "$MY_PID" || true
    fi
    mariadb start
    log "PostgreSQL on 127.0.0.1:$PG_PORT and MariaDB on 127.0.0.1:$MY_PORT are ready"
    ;;
down)
    postgres stop
    mariadb stop
    # Nothing left behind: the cluster, the instance's data, the clock file, the rules.
    if [ -d "/etc/postgresql/$(pg_version)/$PG_CLUSTER" ]; then
        pg_dropcluster --stop "$(pg_version)" "$PG_CLUSTER" >/dev/null 2>&1 || true
    fi
    # pg_dropcluster leaves a configuration folder holding files it did not make.
    rm -rf "/etc/postgresql/$(pg_version)/$PG_CLUSTER"
    wait_for test ! -e "$MY_PID" || true
    rm -rf "$MY_DIR" "$CLOCK_DIR"
    /usr/sbin/nft delete table inet "$NFT_TABLE" 2>/dev/null || true
    ;;
postgres | mariadb)
    "$1" "${2:?start or stop}"
    ;;
*)
    echo "usage: $0 up|down|postgres start|postgres stop|postgres crash|mariadb start|mariadb stop|mariadb crash|mariadb recoveries" >&2
    exit 64
    ;;
esac
