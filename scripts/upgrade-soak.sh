#!/usr/bin/env bash
# upgrade-soak.sh [RUNS]: `upgrade_releases` (old -> new -> old on edge during
# 100k-route inbound bursts, frr and bird2 with BFD 100 ms x 3 and the relay,
# gobgpd) RUNS times in a row (default 10, at most 50), each through
# scripts/run-tests.py. Every run's logs are kept in
# target/upgrade-soak/run-K/; the summary (passed and failed runs, each
# upgrade's `holdfast ctl upgrade --wait` time) is printed and written to
# target/upgrade-soak/summary.txt. Exits non-zero if any run failed.
# Expects the tests built (`make test-build`, as `make upgrade-soak` does)
# and the previous release's holdfastd (scripts/prev-build.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-10}
if ! [[ "$runs" =~ ^[0-9]+$ ]] || [ "$runs" -lt 1 ] || [ "$runs" -gt 50 ]; then
  echo "upgrade-soak: RUNS must be 1..50, not '$runs'" >&2
  exit 2
fi
export HOLDFAST_REQUIRE_LAB=1
bash scripts/prev-build.sh
out=target/upgrade-soak
rm -rf "$out"
mkdir -p "$out"
logs=target/test-logs/holdfast-lab/test-lab
passed=0
failed=()
for k in $(seq 1 "$runs"); do
  echo "upgrade-soak: run $k of $runs"
  rc=0
  python3 scripts/run-tests.py --no-build -p holdfast-lab upgrade_releases \
    >"$out/run-$k.out" 2>&1 || rc=$?
  mkdir -p "$out/run-$k"
  cp "$logs"/upgrade_releases.* "$out/run-$k/" 2>/dev/null || true
  if [ "$rc" = 0 ]; then
    passed=$((passed + 1))
  else
    failed+=("$k")
    echo "upgrade-soak: run $k failed; its logs are in $out/run-$k/"
  fi
done
{
  echo "upgrade_releases: $passed of $runs runs passed${failed:+; failed: ${failed[*]}}"
  for f in "$out"/run-*/upgrade_releases.*.log; do
    [ -e "$f" ] || continue
    grep -h "upgrade figures:" "$f" | sed "s|^|$(basename "$(dirname "$f")") $(basename "$f" .log | sed 's/upgrade_releases\.//'): |"
  done
} | tee "$out/summary.txt"
[ "${#failed[@]}" = 0 ]
