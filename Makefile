# prepfs: `make demo` and `make test` set up everything they need on a fresh Debian machine.

CARGO ?= cargo
PYTHON ?= python3
QUICK ?=

.PHONY: all build deps demo test bench clean

all: build

# System packages (FUSE, and cmake + nasm for the bundled libjpeg-turbo 3) and the Python
# packages the tests compare against (Pillow, numpy). Installs only what is missing.
deps:
	@scripts/install-deps.sh

build: deps
	$(CARGO) build --release --bin prepfs --examples

# Mounts a generated sample dataset, reads it as a user would, prints what it saw, unmounts.
demo: build
	@scripts/demo.sh

# Unit tests, mounted end-to-end tests, the benchmark harness's own self-test.
test: deps
	$(CARGO) build --examples
	$(CARGO) test --all-targets
	$(PYTHON) bench/test_harness.py

# Side-by-side benchmark against the data loaders users would pick instead (QUICK=1: short).
bench: build
	@QUICK=$(QUICK) bench/run.sh

clean:
	$(CARGO) clean
