#!/usr/bin/env bash
# test-build.sh: `make test`'s set-up. Installs what the build needs (protoc,
# the protobuf well-known types, GoBGP's .proto files), then builds every
# binary and every test target of the workspace in one cargo run (`cargo
# build --release --workspace --bins --tests`: one graph, so no core idles
# while the last crates of one half link) while, beside it at nice 19, what
# only the tests need is installed (install-deps.sh test-run: the other
# peers and tools, cargo-deb, the venv, the Debian root) and the fuzz
# targets are built (scripts/fuzz-build.sh, which installs cargo-fuzz;
# `make test` checks them again as a test), then the previous release's
# holdfastd (scripts/prev-build.sh, for the upgrade test between two builds). The build has long stretches on one core (the speaker
# crate, the links), which the second core spends on these. Waits for both;
# prints each step with the time since `make` started (scripts/step.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
step=scripts/step.sh
bash scripts/install-deps.sh --update all
export HOLDFAST_APT_UPDATED=1
bash scripts/install-deps.sh demo-build
(
  nice -n 19 bash scripts/install-deps.sh test-run
  # A failed fuzz build is reported by the test that builds them again.
  nice -n 19 $step -q "building the fuzz targets (scripts/fuzz-build.sh)" \
    bash scripts/fuzz-build.sh crates/wire/fuzz crates/bfd/fuzz || true
  # The previous release's holdfastd, for `upgrade_releases` (which fails,
  # naming this script, when it is missing).
  nice -n 19 $step -q "building the previous release's holdfastd (scripts/prev-build.sh)" \
    bash scripts/prev-build.sh || true
) &
side_pid=$!
trap 'kill "$side_pid" 2>/dev/null || true' EXIT
$step "building every binary and test target of the workspace (cargo)" \
  "${CARGO:-cargo}" build --release --workspace --bins --tests
if ! wait "$side_pid"; then
  echo "install-deps.sh test-run failed" >&2
  exit 1
fi
trap - EXIT
