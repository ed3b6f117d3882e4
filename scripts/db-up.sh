#!/usr/bin/env bash
# Makes sure the test databases are there: PostgreSQL on 127.0.0.1:5432 (user postgres,
# no password) and MariaDB on 127.0.0.1:3306 (root, empty password), each with a
# database `test`. Starts a server that is stopped and installs one that is missing
# (Debian packages, as root). Safe to run again and again.
set -euo pipefail

PG_PORT=${PG_PORT:-5432}
MY_PORT=${MY_PORT:-3306}

log() { printf 'db-up: %s\n' "$*" >&2; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

apt_updated=""
apt_install() {
    if [ -z "$apt_updated" ]; then
        as_root apt-get update -qq
        apt_updated=1
    fi
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "$@" >/dev/null
}

wait_for() { # description, command...
    local what=$1; shift
    for _ in $(seq 1 60); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.5
    done
    log "$what did not come up"
    return 1
}

pg_ready() { pg_isready -q -h 127.0.0.1 -p "$PG_PORT"; }

postgres_up() {
    if command -v pg_isready >/dev/null && pg_ready; then
        log "PostgreSQL is running"
    else
        if ! command -v pg_ctlcluster >/dev/null || [ -z "$(ls /etc/postgresql 2>/dev/null)" ]; then
            log "installing PostgreSQL"
            apt_install postgresql postgresql-client
        fi
        local version
        version=$(ls /etc/postgresql | sort -V | tail -n 1)
        local hba="/etc/postgresql/$version/main/pg_hba.conf"
        # Tests connect over loopback without a password, as on the developers' machines.
        if ! grep -Eq '^host\s+all\s+all\s+127\.0\.0\.1/32\s+trust' "$hba"; then
            log "allowing trusted loopback connections in $hba"
            as_root sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust\nlocal all all trust' "$hba"
        fi
        log "starting PostgreSQL $version"
        as_root pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
        wait_for "PostgreSQL" pg_ready
    fi
    if ! psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'test'" | grep -q 1; then
        log "creating PostgreSQL database test"
        psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -qc "CREATE DATABASE test"
    fi
}

my_ready() { mariadb-admin --protocol=tcp -h 127.0.0.1 -P "$MY_PORT" -uroot ping; }

mariadb_up() {
    if command -v mariadb-admin >/dev/null && my_ready >/dev/null 2>&1; then
        log "MariaDB is running"
    else
        if [ ! -x /usr/sbin/mariadbd ]; then
            log "installing MariaDB"
            apt_install mariadb-server mariadb-client
        fi
        if [ ! -d /var/lib/mysql/mysql ]; then
            as_root mariadb-install-db --user=mysql --datadir=/var/lib/mysql >/dev/null
        fi
        as_root mkdir -p /run/mysqld
        as_root chown mysql:mysql /run/mysqld
        log "starting MariaDB"
        as_root start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd -- --user=mysql
        # The first start of a fresh install may only be reachable through the socket.
        wait_for "MariaDB" mariadb-admin -uroot ping
    fi
    # Root over TCP with an empty password, as the tests connect.
    if ! mariadb --protocol=tcp -h 127.0.0.1 -P "$MY_PORT" -uroot -e "SELECT 1" >/dev/null 2>&1; then
        log "allowing root over loopback without a password"
        as_root mariadb -uroot -e "
            ALTER USER 'root'@'localhost' IDENTIFIED VIA mysql_native_password USING PASSWORD('');
            CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '';
            GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
            FLUSH PRIVILEGES;"
    fi
    wait_for "MariaDB over TCP" my_ready
    mariadb --protocol=tcp -h 127.0.0.1 -P "$MY_PORT" -uroot -e "CREATE DATABASE IF NOT EXISTS test"
}

postgres_up
mariadb_up
log "PostgreSQL on 127.0.0.1:$PG_PORT and MariaDB on 127.0.0.1:$MY_PORT are ready"
