# Holdfast: one command for the demo, one for the tests. Both set themselves up.
SHELL := /bin/bash
CARGO ?= cargo
export PATH := $(HOME)/.cargo/bin:$(PATH)
export CARGO_TERM_COLOR ?= never
BIN := target/release

.PHONY: all deps build test unit-test integration-test fuzz-build demo bench clean-lab deb

all: build

deps:
	@bash scripts/install-deps.sh

build: deps
	$(CARGO) build --release --workspace --bins

## make test: every unit test, every integration test against real peers in
## network namespaces (needs root), and the fuzz targets' build. A lab test that
## cannot run here (not root, a tool missing) fails instead of skipping.
test: export HOLDFAST_REQUIRE_LAB := 1
test: build
	$(CARGO) test --release --workspace --no-fail-fast -- --test-threads=1
	bash scripts/fuzz-build.sh crates/wire/fuzz crates/bfd/fuzz

## make demo: frr and bird2 peers, 100k routes in, 10k out; the four failure kinds of
## TENSOR Table 1, each taken over; Table 1 with what the peers saw, lab/reports/demo.*
demo: build
	$(BIN)/holdfast-demo

## make bench: the TENSOR evaluation (Fig. 5(b), 6(a)-(d), takeover) side by side with bird2, frr and gobgpd.
bench: build
	$(BIN)/holdfast bench

## Remove namespaces and daemons left by a crashed lab run.
clean-lab: build
	$(BIN)/holdfast-demo --cleanup

## make deb: the Debian package (cargo-deb): the shipped binaries, their man pages
## and completions (generated from their clap definitions), systemd units, the
## example configuration and the Grafana dashboard -> target/debian/holdfast_*.deb
deb: deps
	@command -v cargo-deb >/dev/null || $(CARGO) install cargo-deb --locked
	# The workspace's binaries, as `make build` builds them: the same feature set,
	# so after `make build` nothing is compiled again.
	$(CARGO) build --release --workspace --bins
	bash packaging/gen-docs.sh
	$(CARGO) deb -p holdfast-speaker --no-build --strip
