#!/usr/bin/env bash
# Installs what building and testing Holdfast needs on a Debian machine:
# the real peers (bird2, frr, gobgpd, exabgp), redis, etcd (server and
# etcdctl, for the control plane's lab tests), protoc and the protobuf
# well-known types (the etcd-client crate compiles etcd's protos), capture and
# netns tools, ping (the kernel FIB test forwards through a namespace), and a Rust toolchain if none is present. Idempotent and quiet when
# everything is already there.
set -euo pipefail

pkgs=(bird2 frr gobgpd exabgp redis-server etcd-server etcd-client bgpdump protobuf-compiler libprotobuf-dev tcpdump iproute2 iputils-ping iptables procps python3 gnuplot-nox openssl ca-certificates)
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
