#!/usr/bin/env bash
# Build every holdfast-bfd fuzz target (CI entry point; `make test` runs it).
# Exits 0 with a notice when no nightly toolchain is installed; otherwise a
# build failure fails the script.
set -euo pipefail
cd "$(dirname "$0")"

if ! command -v rustup >/dev/null 2>&1 || ! rustup toolchain list | grep -q '^nightly'; then
    echo "bfd/fuzz/build.sh: no nightly toolchain found; skipping fuzz target build (install with: rustup toolchain install nightly)"
    exit 0
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "bfd/fuzz/build.sh: cargo-fuzz missing, installing it"
    cargo +nightly install cargo-fuzz --locked
fi
cargo +nightly fuzz build "$@"
echo "bfd/fuzz/build.sh: built targets: $(cargo +nightly fuzz list | tr '\n' ' ')"
