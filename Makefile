# Holdfast: one command for the demo, one for the tests. Both set themselves up.
SHELL := /bin/bash
CARGO ?= cargo
export PATH := $(HOME)/.cargo/bin:$(PATH)
export CARGO_TERM_COLOR ?= never
# When make started: scripts/step.sh prints each step's time since then.
export HOLDFAST_T0 := $(shell date +%s)
BIN := target/release
STEP := @bash scripts/step.sh

# The binaries `make demo` runs: the demo, the unit (holdfastd), its CLI, the
# control plane (agent, controller, holdfast-ctl) and the BFD relay.
DEMO_BINS := holdfast-demo holdfastd holdfast holdfast-agent holdfast-controller holdfast-ctl holdfast-bfd-relay

.PHONY: all deps demo-deps build demo-build test-build test demo bench clean-lab deb prev-build upgrade-soak

all: build

deps:
	@bash scripts/install-deps.sh all

demo-deps:
	@bash scripts/install-deps.sh demo

build: deps
	$(STEP) "building every binary of the workspace (cargo)" $(CARGO) build --release --workspace --bins

# What the build needs first, then the build with the demo's peers, Redis and
# etcd installed beside it (scripts/demo-build.sh).
demo-build:
	@CARGO=$(CARGO) bash scripts/demo-build.sh $(DEMO_BINS)

# Every binary and test target in one cargo run, with what only the tests
# need installed and the fuzz targets built beside it (scripts/test-build.sh).
test-build:
	@CARGO=$(CARGO) bash scripts/test-build.sh

## make test: every unit test, every integration test against real peers in
## network namespaces (needs root), the doc tests and the fuzz targets' build:
## every test target is built first, then the unit-test binaries run in
## parallel, then each lab scenario in a process of its own, in parallel where
## they share nothing and the cores allow, the timing-sensitive scenarios one at
## a time beside them at a CPU priority, and last the two that share nothing
## alone (scripts/run-tests.py: its phases, groups and job counts). A lab test that cannot run here (not root, a tool missing) fails
## instead of skipping.
test: export HOLDFAST_REQUIRE_LAB := 1
test: test-build
	@CARGO=$(CARGO) python3 scripts/run-tests.py \
	  --extra 'doc-tests=$(CARGO) test --release --workspace --doc' \
	  --extra 'fuzz-build=bash scripts/fuzz-build.sh crates/wire/fuzz crates/bfd/fuzz'

## make prev-build: the previous release's holdfastd (the last tag before HEAD, or
## HOLDFAST_PREV_RELEASE) in target/prev/, for the upgrade test between two builds.
prev-build: deps
	@CARGO=$(CARGO) bash scripts/prev-build.sh

## make upgrade-soak [RUNS=10]: old -> new -> old on edge with frr, bird2 and gobgpd,
## RUNS times in a row (issue 28's 10 of 10); a summary in target/upgrade-soak/.
upgrade-soak: export HOLDFAST_REQUIRE_LAB := 1
upgrade-soak: test-build
	@bash scripts/upgrade-soak.sh $(or $(RUNS),10)

## make demo: frr and bird2 peers, 100k routes in, 10k out; the four failure kinds of
## TENSOR Table 1, each taken over; Table 1 with what the peers saw, lab/reports/demo.*
## Installs and builds only what the demo uses.
demo: demo-build
	$(STEP) -p "running the demo ($(BIN)/holdfast-demo)" $(BIN)/holdfast-demo

## make bench: the TENSOR evaluation (Fig. 5(b), 6(a)-(d), takeover) side by side with bird2, frr and gobgpd.
bench: build
	$(BIN)/holdfast bench

## Remove namespaces and daemons left by a crashed lab run.
clean-lab: demo-build
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
