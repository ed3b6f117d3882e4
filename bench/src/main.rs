//! The `sqlock-bench` binary: everything lives in the library, so tests can call it too.

fn main() {
    std::process::exit(sqlock_bench::main());
}
