# Holdfast: one command for the demo, one for the tests. Both set themselves up.
SHELL := /bin/bash
CARGO ?= cargo
export PATH := $(HOME)/.cargo/bin:$(PATH)
export CARGO_TERM_COLOR ?= never
BIN := target/release

.PHONY: all deps build test unit-test integration-test fuzz-build demo bench clean-lab

all: build

deps:
	@bash scripts/install-deps.sh

build: deps
	$(CARGO) build --release --workspace --bins

## make test: every unit test, every integration test against real peers in
## network namespaces (needs root), and the fuzz targets' build.
test: build
	$(CARGO) test --release --workspace --no-fail-fast -- --test-threads=1
	bash crates/wire/fuzz/build.sh

## make demo: holdfastd between a bird2 and an frr peer, routes flowing.
demo: build
	$(BIN)/holdfast-demo

## make bench: TENSOR Fig. 6(a) side by side with bird2, frr and gobgpd.
bench: build
	$(BIN)/holdfast-bench --out docs/benchmarks.md

## Remove namespaces and daemons left by a crashed lab run.
clean-lab: build
	$(BIN)/holdfast-demo --cleanup
