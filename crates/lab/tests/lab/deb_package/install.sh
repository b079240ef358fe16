#!/usr/bin/env bash
# deb_package's system under test: run as
#   unshare --mount --net --propagation private bash install.sh DEB OUT
# (main.rs does). A fresh root: an overlay of / with an empty upper layer in
# this mount namespace, chrooted into, with its own /run and /tmp; the
# package installed there for real (`dpkg -i`); then, in this fresh network
# namespace (only lo), the units' ExecStart lines as the installed unit files
# give them. Everything it sees goes to OUT for main.rs to judge; the daemons
# it starts are stopped by their PIDs on every exit. Steps are bounded: each
# wait polls with a deadline.
set -euo pipefail
deb=$1
out=$2
mkdir -p "$out"
exec 2> >(tee "$out/install.log" >&2)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
  done
}
trap cleanup EXIT

# The fresh root.
base=$(mktemp -d /tmp/holdfast-deb-root.XXXXXX)
mount -t tmpfs tmpfs "$base"
mkdir -p "$base"/{upper,work,root}
mount -t overlay overlay -o "lowerdir=/,upperdir=$base/upper,workdir=$base/work" "$base/root"
r=$base/root
mount --rbind /proc "$r/proc"
mount --rbind /sys "$r/sys"
mount --rbind /dev "$r/dev"
mount -t tmpfs tmpfs "$r/run"
mount -t tmpfs tmpfs "$r/tmp"
mkdir -p "$r/out"
mount --bind "$out" "$r/out"
cp "$deb" "$r/tmp/holdfast.deb"
in_root() { chroot "$r" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root "$@"; }

# Not installed before, installed after.
if in_root dpkg-query -W holdfast >/dev/null 2>&1; then
  in_root dpkg -r holdfast >/dev/null
fi
t0=$(date +%s%N)
in_root dpkg -i /tmp/holdfast.deb > "$out/dpkg-install.txt" 2>&1
echo "dpkg -i: $(( ($(date +%s%N) - t0) / 1000000 )) ms" >> "$out/timings.txt"
in_root dpkg-query -W -f='${Status} ${Version}\n' holdfast > "$out/dpkg-status.txt"
in_root dpkg -L holdfast > "$out/dpkg-files.txt"

# The units, checked by systemd itself (ExecStart paths, man pages named in
# Documentation=, directives), with an instance for the template.
in_root systemctl enable holdfastd@example.service > "$out/enable.txt" 2>&1
units=(/etc/systemd/system/multi-user.target.wants/holdfastd@example.service
       /lib/systemd/system/holdfast-agent.service
       /lib/systemd/system/holdfast-controller.service
       /lib/systemd/system/holdfast-bfd-relay.service)
verify_rc=0
in_root systemd-analyze verify "${units[@]}" > "$out/verify.txt" 2>&1 || verify_rc=$?
echo "$verify_rc" > "$out/verify.rc"
for u in holdfastd@example.service holdfast-agent.service holdfast-controller.service holdfast-bfd-relay.service; do
  echo "== $u"
  in_root systemd-analyze security --offline=yes --root=/ "$u" 2>&1 | tail -1 || true
done > "$out/security.txt"

# The unit's command line, from the installed unit file, instantiated.
unit_value() { # FILE KEY INSTANCE: every KEY= value, with %i expanded
  sed -n "s/^$2=//p" "$r$1" | sed "s/%i/$3/g"
}
unit_value /lib/systemd/system/holdfastd@.service ExecStart example > "$out/execstart.txt"
exec_start=$(head -1 "$out/execstart.txt")
in_root holdfast config check /etc/holdfast/example.toml > "$out/config-check.txt" 2>&1

# What systemd would do for the unit, as far as it can be done without it:
# the RuntimeDirectory, StateDirectory and LogsDirectory; ProtectSystem=strict
# (the root and /run read-only but for those); the unit's Environment;
# CapabilityBoundingSet and NoNewPrivileges (setpriv). Not done: the
# syscall filter, RestrictAddressFamilies, the Protect* of /proc and /sys.
unit=/lib/systemd/system/holdfastd@.service
ip link set lo up
for d in $(unit_value $unit RuntimeDirectory example); do install -d -m 0750 "$r/run/$d"; mount --bind "$r/run/$d" "$r/run/$d"; done
for d in $(unit_value $unit StateDirectory example); do install -d -m 0750 "$r/var/lib/$d"; mount --bind "$r/var/lib/$d" "$r/var/lib/$d"; done
for d in $(unit_value $unit LogsDirectory example); do install -d -m 0750 "$r/var/log/$d"; mount --bind "$r/var/log/$d" "$r/var/log/$d"; done
mount -o remount,bind,ro "$r"
mount -o remount,bind,ro "$r/run"
bset=-all
for c in $(unit_value $unit CapabilityBoundingSet example); do c=${c#CAP_}; bset+=",+${c,,}"; done
echo "$bset" > "$out/bounding-set.txt"
nnp=()
[ "$(unit_value $unit NoNewPrivileges example)" = yes ] && nnp=(--no-new-privs)
env_args=()
for e in $(unit_value $unit Environment example); do env_args+=("$e"); done
# shellcheck disable=SC2086
chroot "$r" /usr/bin/setpriv --bounding-set "$bset" --inh-caps -all "${nnp[@]}" \
  /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin "${env_args[@]}" $exec_start > "$out/holdfastd.log" 2>&1 &
hf=$!
pids+=("$hf")
t0=$(date +%s%N)
ok=0
for _ in $(seq 100); do
  if in_root holdfast show summary > "$out/summary.txt" 2>/dev/null; then ok=1; break; fi
  kill -0 "$hf" 2>/dev/null || break
  sleep 0.1
done
echo "holdfastd answered show summary: $(( ($(date +%s%N) - t0) / 1000000 )) ms (ok=$ok)" >> "$out/timings.txt"
if [ "$ok" = 1 ]; then
  in_root holdfast show summary --json > "$out/summary.json"
  in_root holdfast show neighbors --json > "$out/neighbors.json"
  grep -E '^(CapEff|CapBnd|NoNewPrivs)' "/proc/$hf/status" > "$out/holdfastd-status.txt"
  ss -ltnH > "$out/listening.txt"
  touch "$r/etc/holdfast/written-by-test" 2> "$out/ro-root.txt" || true
  # The Prometheus endpoint of the example configuration.
  exec 3<>/dev/tcp/127.0.0.1/9179
  printf 'GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n' >&3
  cat <&3 > "$out/metrics-holdfastd.txt"
  exec 3<&-
  # ExecReload as the unit has it ($MAINPID is the daemon).
  while read -r line; do
    line=${line//\$MAINPID/$hf}
    # shellcheck disable=SC2086
    in_root $line >> "$out/reload.txt" 2>&1
  done < <(unit_value /lib/systemd/system/holdfastd@.service ExecReload example)
  sleep 0.2
  in_root holdfast show summary --json > "$out/summary-after-reload.json"
fi
# SIGTERM, as systemctl stop sends it; the exit status.
kill -TERM "$hf" 2>/dev/null || true
rc=timeout
for _ in $(seq 100); do
  if ! kill -0 "$hf" 2>/dev/null; then wait "$hf" && rc=0 || rc=$?; break; fi
  sleep 0.1
done
echo "$rc" > "$out/holdfastd.rc"
mount -o remount,bind,rw "$r/run"
mount -o remount,bind,rw "$r"

# The controller's unit, with etcd on this namespace's loopback, for its
# /metrics.
if command -v etcd >/dev/null; then
  etcd --name pkgtest --data-dir "$base/etcd" --listen-client-urls http://127.0.0.1:23790 \
    --advertise-client-urls http://127.0.0.1:23790 --listen-peer-urls http://127.0.0.1:23800 \
    --initial-advertise-peer-urls http://127.0.0.1:23800 \
    --initial-cluster pkgtest=http://127.0.0.1:23800 > "$out/etcd.log" 2>&1 &
  pids+=("$!")
  cexec=$(unit_value /lib/systemd/system/holdfast-controller.service ExecStart x)
  # Plaintext on loopback, said explicitly (without certificates the
  # controller refuses --listen unless --insecure, docs/security.md).
  opts="--etcd http://127.0.0.1:23790 --name c1 --listen 127.0.0.1:50070 --metrics-listen 127.0.0.1:9180 --insecure"
  # shellcheck disable=SC2086
  # DynamicUser=yes and an empty CapabilityBoundingSet: an unused uid, no capability.
  chroot "$r" /usr/bin/setpriv --reuid 61873 --regid 61873 --clear-groups --bounding-set -all --inh-caps -all --no-new-privs \
    /usr/bin/env -i PATH=/usr/bin:/bin HOLDFAST_CONTROLLER_OPTS="$opts" \
    /bin/sh -c "exec $cexec" > "$out/controller.log" 2>&1 &
  pids+=("$!")
  for _ in $(seq 100); do
    if { exec 3<>/dev/tcp/127.0.0.1/9180; } 2>/dev/null; then
      printf 'GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n' >&3
      cat <&3 > "$out/metrics-controller.txt"
      exec 3<&-
      grep -q '^holdfast_controller_is_leader 1' "$out/metrics-controller.txt" && break
    fi
    sleep 0.1
  done
fi

# An upgrade while a holdfastd of the installed build runs: the same
# package as a newer version (repacked), installed over it. Nothing is
# restarted; both builds are kept at /usr/lib/holdfast/VERSION/holdfastd.
ver=$(in_root dpkg-query -W -f='${Version}' holdfast)
next="${ver}+upgradetest"
echo "$ver $next" > "$out/versions.txt"
mkdir -p "$base/repack"
dpkg-deb -R "$deb" "$base/repack/x"
sed -i "s/^Version: .*/Version: $next/" "$base/repack/x/DEBIAN/control"
dpkg-deb -b "$base/repack/x" "$r/tmp/next.deb" > /dev/null
chroot "$r" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
  /usr/bin/holdfastd --config /etc/holdfast/example.toml > "$out/holdfastd-before-upgrade.log" 2>&1 &
up=$!
pids+=("$up")
for _ in $(seq 100); do
  in_root holdfast show summary > /dev/null 2>&1 && break
  kill -0 "$up" 2>/dev/null || break
  sleep 0.1
done
in_root dpkg -i /tmp/next.deb > "$out/dpkg-upgrade.txt" 2>&1 || echo "dpkg -i failed: $?" >> "$out/dpkg-upgrade.txt"
if kill -0 "$up" 2>/dev/null && in_root holdfast show summary > /dev/null 2>&1; then
  echo alive > "$out/upgrade-running.txt"
else
  echo gone > "$out/upgrade-running.txt"
fi
ls "$r/usr/lib/holdfast" > "$out/kept.txt" 2>&1 || true
for v in "$ver" "$next"; do
  in_root "/usr/lib/holdfast/$v/holdfastd" --schemas > "$out/schemas-$v.txt" 2>&1 || true
done
kill -TERM "$up" 2>/dev/null || true
for _ in $(seq 100); do kill -0 "$up" 2>/dev/null || break; sleep 0.1; done

# Man pages and completions as a user meets them.
in_root sh -c 'for b in holdfastd holdfast holdfast-ctl holdfast-agent holdfast-controller holdfast-bfd-relay; do man -w $b; done' > "$out/man-w.txt" 2>&1 || true
in_root sh -c 'MANPAGER=cat MANWIDTH=80 man holdfast-show-summary' > "$out/man-show-summary.txt" 2>/dev/null || true
in_root bash -c 'source /usr/share/bash-completion/completions/holdfast && complete -p holdfast' > "$out/bash-complete.txt" 2>&1 || true

# Removal: the binaries go, the configuration stays.
in_root dpkg -r holdfast > "$out/dpkg-remove.txt" 2>&1
ls "$r/usr/bin/holdfastd" "$r/etc/holdfast/example.toml" > "$out/after-remove.txt" 2>&1 || true
if [ -e "$r/usr/lib/holdfast" ]; then echo kept; else echo gone; fi > "$out/after-remove-builds.txt"
echo done > "$out/finished"
