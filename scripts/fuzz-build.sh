#!/usr/bin/env bash
# Build every fuzz target of the given cargo-fuzz directories (CI entry
# point; `make test` runs it for crates/wire/fuzz and crates/bfd/fuzz).
# Exits 0 with a notice when no nightly toolchain is installed; otherwise a
# build failure fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v rustup >/dev/null 2>&1 || ! rustup toolchain list | grep -q '^nightly'; then
    echo "fuzz-build: no nightly toolchain found; skipping fuzz target build (install with: rustup toolchain install nightly)"
    exit 0
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "fuzz-build: cargo-fuzz missing, installing it"
    cargo +nightly install cargo-fuzz --locked
fi
for dir in "$@"; do
    (cd "$dir" && cargo +nightly fuzz build && echo "fuzz-build: $dir: built targets: $(cargo +nightly fuzz list | tr '\n' ' ')")
done
