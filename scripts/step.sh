#!/usr/bin/env bash
# step.sh [-q|-p] WHAT CMD [ARG]...: `make demo`'s and `make test`'s progress.
# Prints `[m:ss] WHAT`, the time since HOLDFAST_T0 (seconds since the epoch,
# set by the Makefile when make starts; else now), then runs CMD:
#   - without -q, each line CMD writes (stdout and stderr) is printed with the
#     elapsed time in front, and a `(still WHAT)` line after 30 s of silence;
#   - with -q, CMD's output goes to a log file, printed only if CMD fails, and
#     a `(still WHAT, N s)` line is printed every 15 s;
#   - with -p, CMD's output is left as it is (the demo's table).
# Exits with CMD's status.
set -uo pipefail

t0=${HOLDFAST_T0:-$(date +%s)}
elapsed() {
  local s=$(($(date +%s) - t0))
  printf '[%d:%02d]' $((s / 60)) $((s % 60))
}

quiet=0
plain=0
case ${1:-} in
  -q) quiet=1 && shift ;;
  -p) plain=1 && shift ;;
esac
what=$1
shift
echo "$(elapsed) $what"
start=$(date +%s)

if ((plain)); then
  "$@"
  rc=$?
elif ((quiet)); then
  log=$(mktemp /tmp/holdfast-step.XXXXXX)
  "$@" >"$log" 2>&1 &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    for _ in $(seq 15); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 1
    done
    kill -0 "$pid" 2>/dev/null && echo "$(elapsed)   (still $what, $(($(date +%s) - start)) s)"
  done
  wait "$pid"
  rc=$?
  if ((rc != 0)); then
    echo "$(elapsed) $what failed ($rc):"
    tail -n 60 "$log"
  fi
  rm -f "$log"
else
  "$@" 2>&1 | {
    while true; do
      line=
      IFS= read -r -t 30 line
      st=$?
      if ((st == 0)); then
        echo "$(elapsed)   $line"
      elif ((st > 128)); then
        echo "$(elapsed)   (still $what, $(($(date +%s) - start)) s)"
      else
        [[ -n $line ]] && echo "$(elapsed)   $line"
        break
      fi
    done
  }
  rc=${PIPESTATUS[0]}
fi
((rc == 0)) && echo "$(elapsed) done: $what ($(($(date +%s) - start)) s)"
exit "$rc"
