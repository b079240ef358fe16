#!/usr/bin/env bash
# demo-build.sh BIN...: `make demo`'s set-up. Installs what the build needs
# (protoc, the protobuf well-known types, GoBGP's .proto files), then builds
# the demo's binaries (`cargo build --release --bin BIN...`) while what only
# the demo's run needs (its peers, Redis, etcd, tcpdump, gnuplot) is
# installed beside the build: on a fresh machine the second install takes
# most of apt's time, and it needs the network and the disk more than the
# CPU the build uses. Waits for both; prints each step with the time since
# `make` started (scripts/step.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
step=scripts/step.sh
bash scripts/install-deps.sh --update demo
export HOLDFAST_APT_UPDATED=1
bash scripts/install-deps.sh demo-build
bash scripts/install-deps.sh demo-run &
run_pid=$!
trap 'kill "$run_pid" 2>/dev/null || true' EXIT
args=()
for b in "$@"; do args+=(--bin "$b"); done
$step "building $* (cargo)" "${CARGO:-cargo}" build --release "${args[@]}"
if ! wait "$run_pid"; then
  echo "install-deps.sh demo-run failed" >&2
  exit 1
fi
trap - EXIT
