#!/usr/bin/env bash
# install-deps.sh [--list|--update] [demo-build|demo-run|demo|test-run|all]:
# installs what Holdfast needs on a Debian machine (--list: prints the
# packages only; --update: only `apt-get update`, when one of them is missing,
# for callers that then install two sets at once with HOLDFAST_APT_UPDATED=1,
# scripts/demo-build.sh and scripts/test-build.sh).
#
# `demo` (`make demo`, as `demo-build` then `demo-run`): what building and
# running the demo needs: its peers
# (bird2, frr), redis (the NSR store), etcd (server and etcdctl, the control
# plane), tcpdump (the peers' captures), iproute2, iptables and procps (the
# lab's namespaces, the host-network failure, kill/sysctl), gnuplot (the
# report's plot), and for the build protoc with the protobuf well-known types
# (the etcd-client crate compiles etcd's protos) and GoBGP's API .proto files
# (golang-github-osrg-gobgp-dev, compiled by crates/gobgp-api), and mold, the
# linker scripts/link-gcc uses when it is there (.cargo/config.toml).
#
# `all` (the default; `make build`, `make deb`): the demo's, and what only
# the tests need (`test-run`: all but the build's packages; `make test`
# installs it beside its build, scripts/test-build.sh): the other real peers (gobgpd, exabgp), bgpdump, pmacct,
# stayrtr, ping (the kernel FIB test forwards through a namespace), python3,
# what `make deb` and the package's tests need (dpkg-dev for cargo-deb's
# dependency scan, binutils' strip, systemd-analyze, man-db, systemd-nspawn
# and debootstrap, and cargo-deb itself), a venv with PyPI's
# kubernetes-validate for the manifests' test, and a minimal Debian root for
# the package's test under systemd.
#
# Needs a Rust toolchain (rustup). Idempotent and quiet when everything is
# already there; prints each step with the time since `make` started
# (scripts/step.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
list=0
update=0
case ${1:-} in
  --list) list=1 && shift ;;
  --update) update=1 && shift ;;
esac
mode=${1:-all}
step=scripts/step.sh

# What the build needs, and what only the demo's run needs: `make demo`
# installs the first, then the second while cargo builds (scripts/demo-build.sh).
build_pkgs=(protobuf-compiler libprotobuf-dev golang-github-osrg-gobgp-dev mold)
run_pkgs=(bird2 frr redis-server etcd-server etcd-client tcpdump iproute2 iptables procps gnuplot-nox)
demo_pkgs=("${build_pkgs[@]}" "${run_pkgs[@]}")
test_pkgs=(gobgpd exabgp bgpdump pmacct stayrtr iputils-ping python3 python3-venv openssl ca-certificates dpkg-dev binutils systemd man-db util-linux systemd-container debootstrap)
case $mode in
  demo-build) pkgs=("${build_pkgs[@]}") ;;
  demo-run) pkgs=("${run_pkgs[@]}") ;;
  demo) pkgs=("${demo_pkgs[@]}") ;;
  test-run) pkgs=("${run_pkgs[@]}" "${test_pkgs[@]}") ;;
  all) pkgs=("${demo_pkgs[@]}" "${test_pkgs[@]}") ;;
  *)
    echo "usage: $0 [demo-build|demo-run|demo|test-run|all]" >&2
    exit 2
    ;;
esac
if ((list)); then
  echo "${pkgs[@]}"
  exit 0
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((update)); then
  if ((${#missing[@]})) && [[ $(id -u) -eq 0 ]]; then
    DEBIAN_FRONTEND=noninteractive $step -q "install-deps: apt-get update" apt-get update -qq
  fi
  exit 0
fi
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "install-deps: need root to apt-get install: ${missing[*]}" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  # HOLDFAST_APT_UPDATED=1: the caller ran it (`--update`).
  if [[ ${HOLDFAST_APT_UPDATED:-} != 1 ]]; then
    $step -q "install-deps: apt-get update" apt-get update -qq
  fi
  $step -q "install-deps: apt-get install ${missing[*]}" \
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# Packaged daemons must not run as services: the lab starts its own.
for svc in bird frr gobgpd exabgp redis-server etcd; do
  if command -v service >/dev/null && service "$svc" status >/dev/null 2>&1; then
    service "$svc" stop >/dev/null 2>&1 || true
  fi
done
if ! command -v cargo >/dev/null; then
  if [[ -x "$HOME/.cargo/bin/cargo" ]]; then
    echo "install-deps: cargo is in ~/.cargo/bin; add it to PATH" >&2
  else
    echo "install-deps: no Rust toolchain found (install rustup)" >&2
  fi
  exit 1
fi
[[ $mode == all || $mode == test-run ]] || exit 0
# `make deb` (and the deb_package test, which runs it when no package is newer
# than holdfastd) packages with cargo-deb.
if ! command -v cargo-deb >/dev/null; then
  $step -q "install-deps: cargo install cargo-deb" cargo install cargo-deb --locked --quiet
fi
# The k8s_manifests test validates deploy/kubernetes/ with kubernetes-validate
# (PyPI), which bundles the Kubernetes JSON schemas: no cluster needed.
k8s_venv=/var/cache/holdfast-test/k8s-venv
if [[ ! -x $k8s_venv/bin/kubernetes-validate ]]; then
  mkdir -p "$(dirname "$k8s_venv")"
  $step -q "install-deps: kubernetes-validate into $k8s_venv" \
    bash -c "python3 -m venv '$k8s_venv' && '$k8s_venv/bin/pip' install --quiet kubernetes-validate"
fi
# The deb_package_systemd test boots a minimal Debian with systemd-nspawn
# (booted with --volatile=overlay, so the tree itself never changes) and
# installs the package there: minbase with systemd and the package's Depends.
nspawn_tree=/var/cache/holdfast-test/nspawn-root
if [[ ! -x $nspawn_tree/lib/systemd/systemd ]]; then
  rm -rf "$nspawn_tree.new"
  # The Debian mirror apt is set up with on this machine (deb822 or one-line
  # sources), so debootstrap fetches from where apt-get does.
  mirror=$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  [[ -n $mirror ]] || mirror=$(awk '$1 == "deb" && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
  if [[ -z $mirror ]]; then
    echo "install-deps: no Debian mirror found in apt's sources for debootstrap" >&2
    exit 1
  fi
  $step -q "install-deps: debootstrap a minimal Debian into $nspawn_tree" \
    debootstrap --variant=minbase --include=systemd,systemd-sysv,dbus,iptables,iproute2,procps \
    "$(. /etc/os-release && echo "$VERSION_CODENAME")" "$nspawn_tree.new" "$mirror"
  mv "$nspawn_tree.new" "$nspawn_tree"
fi
