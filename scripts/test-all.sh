#!/usr/bin/env bash
# The whole test suite: formatting, lints, and every Rust test (unit, fixture parity,
# integration). GPU tests skip themselves (and say so) when no GPU is present.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace
