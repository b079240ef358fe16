#!/usr/bin/env bash
# Generates the man pages and shell completions of every binary the package
# ships, from the binaries themselves (`BIN --generate-docs DIR`, the
# holdfast-docgen crate), into target/release/packaging-docs/. Run by `make deb`
# after the release build and before cargo-deb.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=target/release
out=target/release/packaging-docs
rm -rf "$out"
mkdir -p "$out"
for b in holdfastd holdfast holdfast-ctl holdfast-agent holdfast-controller holdfast-bfd-relay; do
  "$bin/$b" --generate-docs "$out" >/dev/null
done
gzip -9n "$out"/man/*.1
echo "gen-docs: $(ls "$out"/man | wc -l) man pages, $(find "$out"/completions -type f | wc -l) completions in $out"
