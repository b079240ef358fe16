#!/usr/bin/env bash
# Installs what building and testing Holdfast needs on a Debian machine:
# the real peers (bird2, frr, gobgpd, exabgp), the GoBGP API .proto files
# (golang-github-osrg-gobgp-dev, compiled by crates/gobgp-api), redis, etcd (server and
# etcdctl, for the control plane's lab tests), protoc and the protobuf
# well-known types (the etcd-client crate compiles etcd's protos), capture and
# netns tools, ping (the kernel FIB test forwards through a namespace), what `make deb` and the package's test need (dpkg-dev for
# cargo-deb's dependency scan, binutils' strip, systemd-analyze, man-db, and
# cargo-deb itself), a venv with PyPI's kubernetes-validate for the manifests'
# test, and a Rust toolchain if none is present. Idempotent and quiet when
# everything is already there.
set -euo pipefail

pkgs=(bird2 frr gobgpd golang-github-osrg-gobgp-dev exabgp redis-server etcd-server etcd-client bgpdump pmacct stayrtr protobuf-compiler libprotobuf-dev tcpdump iproute2 iputils-ping iptables procps python3 python3-venv gnuplot-nox openssl ca-certificates dpkg-dev binutils systemd man-db util-linux systemd-container debootstrap)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "install-deps: need root to apt-get install: ${missing[*]}" >&2
    exit 1
  fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
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
# `make deb` (and the deb_package test, which runs it when no package is newer
# than holdfastd) packages with cargo-deb.
if ! command -v cargo-deb >/dev/null; then
  echo "install-deps: cargo install cargo-deb"
  cargo install cargo-deb --locked --quiet
fi
# The k8s_manifests test validates deploy/kubernetes/ with kubernetes-validate
# (PyPI), which bundles the Kubernetes JSON schemas: no cluster needed.
k8s_venv=/var/cache/holdfast-test/k8s-venv
if [[ ! -x $k8s_venv/bin/kubernetes-validate ]]; then
  echo "install-deps: kubernetes-validate into $k8s_venv"
  mkdir -p "$(dirname "$k8s_venv")"
  python3 -m venv "$k8s_venv"
  "$k8s_venv/bin/pip" install --quiet kubernetes-validate
fi
# The deb_package_systemd test boots a minimal Debian with systemd-nspawn
# (booted with --volatile=overlay, so the tree itself never changes) and
# installs the package there: minbase with systemd and the package's Depends.
nspawn_tree=/var/cache/holdfast-test/nspawn-root
if [[ ! -x $nspawn_tree/lib/systemd/systemd ]]; then
  echo "install-deps: debootstrap a minimal Debian into $nspawn_tree (a few minutes)"
  rm -rf "$nspawn_tree.new"
  # The Debian mirror apt is set up with on this machine (deb822 or one-line
  # sources), so debootstrap fetches from where apt-get does.
  mirror=$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  [[ -n $mirror ]] || mirror=$(awk '$1 == "deb" && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
  if [[ -z $mirror ]]; then
    echo "install-deps: no Debian mirror found in apt's sources for debootstrap" >&2
    exit 1
  fi
  debootstrap --variant=minbase --include=systemd,systemd-sysv,dbus,iptables,iproute2,procps \
    "$(. /etc/os-release && echo "$VERSION_CODENAME")" "$nspawn_tree.new" "$mirror" >/dev/null
  mv "$nspawn_tree.new" "$nspawn_tree"
fi
