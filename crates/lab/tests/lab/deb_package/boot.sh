#!/usr/bin/env bash
# deb_package's second system under test: the package under a real systemd.
#   bash boot.sh TREE DEB OUT
# TREE is a minimal Debian (debootstrap --variant=minbase with systemd and
# the package's Depends; scripts/install-deps.sh builds it). It is booted
# with systemd-nspawn --volatile=overlay (its changes go to a tmpfs and are
# gone at exit) and --private-network (lo only); the package is installed
# with dpkg -i and its units run by systemd, with all their sandboxing.
# Redis runs in the container's network namespace for the fencing check.
# Everything it sees goes to OUT; the container and Redis are stopped by
# their PIDs on every exit. Every wait is bounded.
set -euo pipefail
tree=$1
deb=$2
out=$3
mkdir -p "$out"
exec 2> >(tee "$out/boot.log" >&2)
nsp=""
redis_pid=""
cleanup() {
  [ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null || true
  if [ -n "$nsp" ] && kill -0 "$nsp" 2>/dev/null; then
    kill -TERM "$nsp" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$nsp" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$nsp" 2>/dev/null || true
  fi
}
trap cleanup EXIT

t0=$(date +%s%N)
ms() { echo $(( ($(date +%s%N) - t0) / 1000000 )); }
systemd-nspawn -D "$tree" --volatile=overlay --boot --private-network --register=no --keep-unit \
  --bind-ro="$(dirname "$deb")":/mnt/deb --machine="hfpkg$$" > "$out/console.log" 2>&1 &
nsp=$!
leader=""
# The container's init: nspawn's child named systemd (nspawn first forks a
# helper that clones init and exits, so its first child is not always init).
for _ in $(seq 100); do
  leader=$( (ps --ppid "$nsp" -o pid=,comm= || true) | awk '$2 == "systemd" {print $1; exit}')
  [ -n "$leader" ] && [ -e "/proc/$leader/ns/user" ] && break
  leader=""
  sleep 0.1
done
[ -n "$leader" ] || { echo "no container init under nspawn $nsp" >&2; exit 1; }
n() { nsenter -t "$leader" -a -- "$@"; }
state=""
for _ in $(seq 300); do
  state=$(n systemctl is-system-running 2>/dev/null || true)
  case "$state" in running|degraded) break ;; esac
  sleep 0.1
done
echo "booted ($state): $(ms) ms" >> "$out/timings.txt"
echo "$state" > "$out/system-state.txt"

n dpkg -i "/mnt/deb/$(basename "$deb")" > "$out/dpkg-install.txt" 2>&1
echo "installed: $(ms) ms" >> "$out/timings.txt"
n ip link set lo up

# The unit as an operator starts it.
n systemctl start holdfastd@example.service
ok=0
for _ in $(seq 100); do
  if n holdfast show summary > "$out/summary.txt" 2>/dev/null; then ok=1; break; fi
  sleep 0.1
done
echo "holdfastd@example answered: $(ms) ms (ok=$ok)" >> "$out/timings.txt"
n holdfast show summary --json > "$out/summary.json" 2>&1 || true
n systemctl show -p ActiveState,MainPID,NRestarts holdfastd@example.service > "$out/example-state.txt"
n ss -ltnH > "$out/listening.txt"
pid=$(sed -n 's/^MainPID=//p' "$out/example-state.txt")
n grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' "/proc/$pid/status" > "$out/example-status.txt" || true

# ExecReload: `systemctl reload` succeeds and the daemon reloads.
reload_rc=0
n systemctl reload holdfastd@example.service > "$out/reload.txt" 2>&1 || reload_rc=$?
echo "$reload_rc" > "$out/reload.rc"

# A crash is restarted (Restart=on-failure).
n systemctl kill -s KILL holdfastd@example.service
for _ in $(seq 60); do
  st=$(n systemctl show -p NRestarts,ActiveState,SubState holdfastd@example.service | tr '\n' ' ')
  case "$st" in *NRestarts=1*ActiveState=active*SubState=running*) break ;; esac
  sleep 0.1
done
n systemctl show -p ActiveState,SubState,MainPID,NRestarts holdfastd@example.service > "$out/after-kill.txt"
for _ in $(seq 100); do
  n holdfast show summary --json > "$out/summary-after-kill.json" 2>/dev/null && break
  sleep 0.1
done

# Fenced (exit 75) is not restarted (RestartPreventExitStatus=75): an NSR
# instance on Redis, then a newer epoch in the store.
nsenter -t "$leader" -n -- redis-server --port 6379 --bind 127.0.0.1 --save "" --appendonly no \
  > "$out/redis.log" 2>&1 &
redis_pid=$!
n sh -c 'sed -e "s|^# \[nsr\]|[nsr]|" -e "s|^# store = .*|store = \"redis://127.0.0.1:6379\"|" \
  -e "s|^# instance = .*|instance = \"pkgtest\"|" -e "s|holdfastd.sock|nsr.sock|" \
  -e "s|127.0.0.1:9179|127.0.0.1:9178|" -e "s|^listen = .*|listen = \"0.0.0.0:1179\"|" \
  /etc/holdfast/example.toml > /etc/holdfast/nsr.toml'
n systemctl start holdfastd@nsr.service
for _ in $(seq 100); do
  n holdfast -s /run/holdfast/nsr.sock show nsr --json > "$out/nsr.json" 2>/dev/null && grep -q '"protected": *true' "$out/nsr.json" && break
  sleep 0.1
done
n iptables-save > "$out/iptables.txt" 2>&1 || true
nsenter -t "$leader" -n -- redis-cli INCR 'hf:{pkgtest}:epoch' > "$out/incr.txt"
for _ in $(seq 100); do
  [ "$(n systemctl show -p ActiveState --value holdfastd@nsr.service)" = failed ] && break
  sleep 0.1
done
# Longer than RestartSec=2s: a restart would have happened by now.
sleep 3
n systemctl show -p ActiveState,Result,ExecMainStatus,NRestarts holdfastd@nsr.service > "$out/fenced.txt"

# The other units, with their /etc/default arguments (etcd is not in the tree:
# the controller and agent are started only to see systemd accept them; the
# relay reads the Redis above).
n sh -c 'echo HOLDFAST_BFD_RELAY_OPTS=\"--store redis://127.0.0.1:6379\" > /etc/default/holdfast-bfd-relay'
n systemctl start holdfast-bfd-relay.service
sleep 1
n systemctl show -p ActiveState,SubState,NRestarts holdfast-bfd-relay.service > "$out/relay.txt"

for u in holdfastd@example holdfast-agent holdfast-controller holdfast-bfd-relay; do
  echo "== $u"
  n systemd-analyze security --no-pager "$u.service" 2>&1 | tail -1
done > "$out/security.txt"
n journalctl --no-pager -u holdfastd@example -u holdfastd@nsr -u holdfast-bfd-relay > "$out/journal.txt" 2>&1 || true

n systemctl poweroff || true
for _ in $(seq 100); do kill -0 "$nsp" 2>/dev/null || break; sleep 0.1; done
echo "done: $(ms) ms" >> "$out/timings.txt"
echo done > "$out/finished"
