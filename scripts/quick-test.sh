#!/usr/bin/env bash
# The quick path for contributors: every test of the library and the tool on SQLite
# alone, with the unit tests and doctests, formatting and lints. Needs no server and
# no root; the tests of the servers alone (faults, poolers, clusters) run on nothing
# here. CI runs everything, servers included: `.ci/run` (scripts/test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

unset CI SQLOCK_REQUIRE_SERVERS
export SQLOCK_TEST_SQLITE_ONLY=1
FEATURES="sqlock/postgres,sqlock/mysql,sqlock/sqlite,sqlock/metrics,sqlock-bench/redis-baseline"

echo "== cargo fmt"
cargo fmt --all -- --check

echo "== cargo clippy"
cargo clippy --workspace --all-targets --features "$FEATURES" --quiet -- -D warnings

echo "== cargo test on SQLite (unit, doc and integration tests)"
cargo test --workspace --features "$FEATURES" --no-fail-fast
