#!/usr/bin/env bash
# The whole test suite, servers included: starts (or installs) PostgreSQL and MariaDB,
# starts the fault tests' own instances of both and the deployment tests' PgBouncer,
# Galera cluster and standby pair, checks formatting and lints, builds
# each database feature alone, then runs every test on SQLite, PostgreSQL and MariaDB.
# A server that cannot be reached fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/db-up.sh
# The fault tests' own server instances, which they stop and start; stopped again
# when this script ends, however it ends.
bash scripts/fault-db.sh up
trap 'bash scripts/fault-db.sh down' EXIT
# PgBouncer, a three-node Galera cluster and a primary with a synchronous standby, for
# the deployment tests; all stopped again when this script ends.
bash scripts/ha.sh up
trap 'bash scripts/fault-db.sh down; bash scripts/ha.sh down' EXIT

# Tests fail, never skip, when a server is missing.
export SQLOCK_REQUIRE_SERVERS=1

# Every feature but the benchmark's `peers`, whose published peers are built on another
# sqlx (0.8) and are measured by hand, never in CI (docs/benchmarks.md). Lint them with
# `cargo clippy --workspace --all-targets --all-features`.
FEATURES="sqlock/postgres,sqlock/mysql,sqlock/sqlite,sqlock/metrics,sqlock-bench/redis-baseline"

echo "== cargo fmt"
cargo fmt --all -- --check

echo "== cargo clippy"
cargo clippy --workspace --all-targets --features "$FEATURES" --quiet -- -D warnings

echo "== each database feature on its own"
for feature in postgres mysql sqlite; do
    cargo check --quiet --no-default-features --features "$feature"
done

echo "== cargo test: the library and the sqlock tool (SQLite, PostgreSQL, MariaDB)"
# The output is kept, so that a failure in a long run's middle is shown again at its
# end, where a CI log's tail shows it: each test binary's failures, and the fault
# workload's own error.
log=target/test-output.log
mkdir -p target
if ! cargo test --workspace --features "$FEATURES" --no-fail-fast 2>&1 | tee "$log"; then
    echo
    echo "== what failed (from $log)"
    grep -n -A40 -E '^failures:$|^faults: |^Error: ' "$log" | head -400 || true
    exit 1
fi
