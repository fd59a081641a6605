# prepfs: `make demo` and `make test` set up everything they need on a fresh Debian machine.

CARGO ?= cargo
PYTHON ?= python3
QUICK ?=

.PHONY: all build deps demo test check compare-torchvision python wheel gpu-check ptx bench bench-plan bench-epochs bench-cold-epochs bench-jobs bench-floor bench-workers profile fuzz clean install uninstall

all: build

# System packages (FUSE, and cmake + nasm for the bundled libjpeg-turbo 3) and the Python
# packages the tests compare against (Pillow, numpy). Installs only what is missing.
deps:
	@scripts/install-deps.sh

build: deps
	$(CARGO) build --release -p prepfs --bin prepfs --examples

# `make install` (as root, after `make build` or with cargo at hand): the release binary (stripped) and the
# mount(8) helper to $(BINDIR), and $(SBINDIR)/mount.fuse.prepfs linked to the helper, which
# `mount -t fuse.prepfs` and /etc/fstab lines of type fuse.prepfs run, and the systemd unit
# contrib/prepfs@.service to $(SYSTEMDDIR) (its ExecStart naming $(BINDIR)/prepfs; `systemctl
# daemon-reload` then, as docs/operations.md says). DESTDIR stages it; BIN installs another build;
# SYSTEMDDIR=/lib/systemd/system for a package.
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
SBINDIR ?= /sbin
SYSTEMDDIR ?= /etc/systemd/system
BIN ?= target/release/prepfs

target/release/prepfs:
	$(CARGO) build --release -p prepfs --bin prepfs

install: $(BIN)
	install -D -s -m 0755 $(BIN) $(DESTDIR)$(BINDIR)/prepfs
	install -D -m 0755 scripts/mount.prepfs $(DESTDIR)$(BINDIR)/mount.prepfs
	install -d $(DESTDIR)$(SBINDIR)
	ln -sf $(BINDIR)/mount.prepfs $(DESTDIR)$(SBINDIR)/mount.fuse.prepfs
	mkdir -p target && sed 's|/usr/local/bin/prepfs|$(BINDIR)/prepfs|' contrib/prepfs@.service > target/prepfs@.service
	install -D -m 0644 target/prepfs@.service $(DESTDIR)$(SYSTEMDDIR)/prepfs@.service
	sed 's|/usr/local/bin/prepfs|$(BINDIR)/prepfs|' contrib/prepfs-worker@.service > target/prepfs-worker@.service
	install -D -m 0644 target/prepfs-worker@.service $(DESTDIR)$(SYSTEMDDIR)/prepfs-worker@.service

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/prepfs $(DESTDIR)$(BINDIR)/mount.prepfs $(DESTDIR)$(SBINDIR)/mount.fuse.prepfs
	rm -f $(DESTDIR)$(SYSTEMDDIR)/prepfs@.service $(DESTDIR)$(SYSTEMDDIR)/prepfs-worker@.service

# Mounts a generated sample dataset, reads it as a user would, prints what it saw, unmounts.
demo: build
	@scripts/demo.sh

# The Python module (`import prepfs`: prepfs.Loader, python/): built with maturin (pyo3) and
# installed for $(PYTHON), with the GPU path (the `gpu` feature: libcuda is loaded at run time, so
# it builds and imports on machines without CUDA). pip (ensurepip) and maturin are installed
# into $(PYTHON)'s own environment where missing (a venv's python: `make python PYTHON=venv/bin/python`).
# MATURIN_PROFILE: `--release` for users; `make test` builds the module in cargo's dev profile
# (the loader's tests check behaviour, not speed; the release build with LTO took 2.5 minutes).
MATURIN_PROFILE ?= --release
python: deps
	@$(PYTHON) -m pip --version >/dev/null 2>&1 || { echo "installing pip for $(PYTHON)"; $(PYTHON) -m ensurepip --upgrade; }
	@$(PYTHON) -m maturin --version >/dev/null 2>&1 || { echo "installing maturin for $(PYTHON)"; \
	  $(PYTHON) -m pip install -q maturin 2>/dev/null || $(PYTHON) -m pip install -q --break-system-packages maturin; }
	rm -rf target/wheels
	cd python && $(PYTHON) -m maturin build $(MATURIN_PROFILE) --features gpu -o ../target/wheels
	$(PYTHON) -m pip install -q --force-reinstall --no-deps target/wheels/prepfs-*.whl 2>/dev/null \
	  || $(PYTHON) -m pip install -q --force-reinstall --no-deps --break-system-packages target/wheels/prepfs-*.whl

# A wheel of the Python module for machines without Rust (issue 54): one abi3 wheel (CPython
# 3.8 and later) of the release build, with the GPU path (it loads CUDA at run time, only where a
# loader asks for it), into dist/. `pip install dist/prepfs-*.whl` then needs no toolchain;
# python/tests/test_wheel.py installs `make python`'s wheel into a fresh venv the same way.
wheel: deps
	@$(PYTHON) -m pip --version >/dev/null 2>&1 || { echo "installing pip for $(PYTHON)"; $(PYTHON) -m ensurepip --upgrade; }
	@$(PYTHON) -m maturin --version >/dev/null 2>&1 || { echo "installing maturin for $(PYTHON)"; \
	  $(PYTHON) -m pip install -q maturin 2>/dev/null || $(PYTHON) -m pip install -q --break-system-packages maturin; }
	rm -rf dist
	cd python && $(PYTHON) -m maturin build --release --features gpu -o ../dist
	@ls dist/prepfs-*-abi3-*.whl

# The GPU path on a machine with an NVIDIA GPU: the module with the `gpu` feature, the mounted GPU
# test, and samples/s and upload throughput with device="cuda" against the CPU path (scripts/
# gpu-check.sh; a few minutes). Without a GPU it says "skipped: no GPU" and succeeds.
gpu-check: deps
	PYTHON=$(PYTHON) sh scripts/gpu-check.sh

# The GPU path's kernel as PTX (needs clang; the PTX is committed, so only after editing the .cu).
ptx:
	clang-14 -x cuda --cuda-device-only --cuda-gpu-arch=sm_52 -nocudainc -nocudalib -O3 -S \
	  -o python/src/kernels/normalize.ptx python/src/kernels/normalize.cu

# Every workspace crate's unit and integration tests: the core's without FUSE
# (crates/prepfs-core), the mounted end-to-end tests (crates/prepfs/tests; the loader's with the
# Python module built and installed first); the shuttle model checks of the cache's and
# sampling's concurrency (crates/prepfs-sampling/tests/shuttle.rs, a build with `--features
# shuttle`), the benchmark harness's own self-test (bench/tests), and last python/tests (pytest,
# installed for $(PYTHON) where missing: prepfs.recipe, and prepfs.Loader on a mount by the debug
# binary just built). The fuzz targets are workspace
# members built only with their `fuzz-targets` feature, which the build line below turns on
# (linked with libFuzzer), so a rename in the core breaks make test, not only make fuzz; without
# it a plain `cargo test --workspace --all-targets` leaves them out (run as tests, libFuzzer
# would fuzz forever).
# As root on Linux 6.9 or later the passthrough tests must run (PREPFS_REQUIRE_PASSTHROUGH):
# elsewhere they say skipped.
REQUIRE_PASSTHROUGH := $(shell [ "$$(id -u)" = 0 ] && printf '%s\n6.9\n' "$$(uname -r | cut -d- -f1)" | sort -V -C -r && echo 1)
# The edit loop's check (warm, about a minute): the layers, a build of every target, clippy, and
# the core's in-process tests (no FUSE, no servers).
check:
	$(PYTHON) scripts/check-layers.py
	$(CARGO) build --workspace --all-targets
	$(CARGO) clippy --workspace --all-targets --quiet
	$(TEST_RUN) -p prepfs-core --lib

# The tests run under cargo-nextest where it is installed (it is on this project's machines): every
# binary's tests side by side, each in a process of its own, rather than cargo test's one binary
# after another; plain `cargo test` otherwise. The layers' check (scripts/check-layers.py) first:
# it takes a second and fails a change that adds an edge to an import cycle.
NEXTEST := $(shell $(CARGO) nextest --version >/dev/null 2>&1 && echo 1)
TEST_RUN = $(if $(NEXTEST),$(CARGO) nextest run --no-fail-fast --status-level fail --final-status-level slow,$(CARGO) test)
test: deps
	$(PYTHON) scripts/check-layers.py
	$(MAKE) python MATURIN_PROFILE="--profile dev"
	$(CARGO) build --workspace --all-targets --features prepfs-fuzz/fuzz-targets
	PREPFS_REQUIRE_LOADER=1 $(if $(REQUIRE_PASSTHROUGH),PREPFS_REQUIRE_PASSTHROUGH=1) $(TEST_RUN) --workspace --tests
	$(TEST_RUN) -p prepfs-sampling --features shuttle --test shuttle
	$(PYTHON) bench/tests
	@$(PYTHON) -m pytest --version >/dev/null 2>&1 || $(PYTHON) -m pip install -q pytest 2>/dev/null || $(PYTHON) -m pip install -q --break-system-packages pytest
	PREPFS_BIN=$(CURDIR)/target/debug/prepfs PREPFS_REQUIRE_LOADER=1 $(PYTHON) -m pytest -q python/tests

# Each augment op against torchvision v2 on real photographs (tests/mount_torchvision.rs: KS tests
# of per-image statistics). Installs torch and torchvision from PyPI for $(PYTHON) where missing:
# with their CUDA libraries that is a 2.9 GB download and 5.5 GB installed (7.4 min on the 2-core
# build machine), too heavy for `make test`, which runs the test as "skipped" without them.
compare-torchvision: deps
	@$(PYTHON) -c "import torchvision, timm" 2>/dev/null || { echo "installing torch, torchvision and timm for $(PYTHON)"; \
	  $(PYTHON) -m pip install -q torch torchvision timm 2>/dev/null || $(PYTHON) -m pip install -q --break-system-packages torch torchvision timm; }
	PREPFS_REQUIRE_TORCHVISION=1 PREPFS_TORCH_PYTHON=$(PYTHON) $(CARGO) test -p prepfs --test mounted torchvision:: -- --nocapture

# Back-to-back epochs with the plan's predictions beside them (bench/results/<date>-epochs.md;
# its table in BENCHMARKS.md's Runs), and 3 concurrent jobs with the defaults against jobs
# decoding JPEGs themselves.
bench-epochs: build
	PYTHONPATH=bench $(PYTHON) -m prepfs_bench.epochs --prepfs target/release/prepfs --gen target/release/examples/make_dataset

# The planner's acceptance matrix (issue 32): data sets x cache x storage, auto against every
# fixed split over 3 epochs, each epoch's prediction against its measurement
# (bench/results/<date>-plan-matrix.md; its table in BENCHMARKS.md's Runs). PLAN_ARGS narrows
# it, e.g. "--sets real --storage local".
PLAN_ARGS ?=
bench-plan: build
	PYTHONPATH=bench $(PYTHON) -m prepfs_bench.plan_matrix --prepfs target/release/prepfs --gen target/release/examples/make_dataset $(PLAN_ARGS)

bench-jobs: build
	PYTHONPATH=bench $(PYTHON) -m prepfs_bench.jobs --prepfs target/release/prepfs --gen target/release/examples/make_dataset

# Where the daemon's CPU goes in bench-jobs's three-job run (issue 55): `perf record` (cpu-clock,
# DWARF call graphs) on the mount's server while three jobs read two epochs over real
# photographs, its samples put in categories (decode, resize, augment, output and copies, FUSE,
# locks, page cache, allocation), each job's time blocked in open and read beside what the cores
# did meanwhile and the plan's prediction, and flame graphs (inferno, installed where missing)
# under bench/results/<date>-profile/ (the table also in BENCHMARKS.md's Runs). Needs perf
# (Debian linux-perf) and root or perf_event_paranoid <= 1. PROFILE_ARGS adds options (e.g.
# "--sets real,gen500 --baseline").
PROFILE_ARGS ?=
profile: build
	@command -v perf >/dev/null || { echo "make profile needs perf (apt-get install linux-perf)"; exit 1; }
	@command -v inferno-flamegraph >/dev/null || test -x $(HOME)/.cargo/bin/inferno-flamegraph || $(CARGO) install inferno --locked
	PYTHONPATH=bench timeout 1800 $(PYTHON) -m prepfs_bench.profile --prepfs target/release/prepfs \
		--gen target/release/examples/make_dataset $(PROFILE_ARGS)

# Back-to-back epochs from a cold mount (page cache dropped), over bench/run.sh's data set;
# COLD_BINS=a,b (and COLD_LABELS) compares builds in alternated runs.
COLD_BINS ?= target/release/prepfs
bench-cold-epochs: build
	@test -d target/bench-data/train || target/release/examples/make_dataset --out target/bench-data/train \
		--classes 20 --per-class 40 --width 500 --height 375 --seed 0 --quiet
	PYTHONPATH=bench timeout 1200 $(PYTHON) -m prepfs_bench.cold_epochs --prepfs $(COLD_BINS) $(if $(COLD_LABELS),--labels $(COLD_LABELS)) \
		--data target/bench-data/train

# Row 3d and the FUSE floor (3h, 3k) in alternating passes, 15 rounds, over bench/run.sh's data
# set (bench/results/<date>-warm-floor.md; its ratios in BENCHMARKS.md's Runs): the warm target's ratios, measured side by side.
bench-floor: build
	@test -d target/bench-data/train || target/release/examples/make_dataset --out target/bench-data/train \
		--classes 20 --per-class 40 --width 500 --height 375 --seed 0 --quiet
	PYTHONPATH=bench timeout 900 $(PYTHON) -m prepfs_bench.warm_floor --prepfs target/release/prepfs \
		--floorfs target/release/examples/floorfs --data target/bench-data/train

# `prepfs worker` (issue 52), this machine as two (core 0: the mount and its readers; core 1: Redis
# and the workers): cold first epochs alone, with one and two workers, two jobs, and the kill test,
# over real photographs and the generator's set (bench/results/<date>-workers.md; its table in
# BENCHMARKS.md's Runs). QUICK=1: one round over the generator's set; WORKERS_ARGS adds options
# (e.g. "--cases a,c --repeats 5").
WORKERS_ARGS ?=
bench-workers: build
	PYTHONPATH=bench timeout 3600 $(PYTHON) -m prepfs_bench.workers --prepfs target/release/prepfs \
		--gen target/release/examples/make_dataset $(if $(QUICK),--quick) $(WORKERS_ARGS)

# Supervised restarts (issue 53): two jobs read two epochs (train: augmented/, two reader
# processes; check: encoded/, every byte checked against the source) while the server is SIGKILLed
# three times and upgraded once, against a run with no restart, over real photographs and the
# generator's set (bench/results/<date>-restarts.md; its table in BENCHMARKS.md's Runs): each
# stall, the readers' latencies, errors, each sample once per epoch. QUICK=1: the generator's set,
# 10 classes x 20; RESTARTS_ARGS adds options (e.g. "--sets gen --classes 40").
.PHONY: bench-restarts
RESTARTS_ARGS ?=
bench-restarts: build
	PYTHONPATH=bench timeout 3600 $(PYTHON) -m prepfs_bench.restarts --prepfs target/release/prepfs \
		--gen target/release/examples/make_dataset $(if $(QUICK),--quick) $(RESTARTS_ARGS)

# Side-by-side benchmark against the data loaders users would pick instead (QUICK=1: short).
bench: build
	@QUICK=$(QUICK) bench/run.sh

# cargo-fuzz targets (fuzz/README.md), each for FUZZ_RUNS inputs starting from its committed
# seeds (fuzz/seeds/T); the corpus it grows goes to fuzz/corpus/T (not committed). Fails if any
# target crashes (or fails to build); a crashing input is saved under fuzz/artifacts/T.
FUZZ_RUNS ?= 20000
FUZZ_MAX_LEN ?= 65536
FUZZ_TARGETS ?= jpeg_probe_decode config_parse disk_entry shard_headers

fuzz: deps
	@command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz --locked
	@rustup run nightly rustc --version >/dev/null 2>&1 || rustup toolchain install nightly --profile minimal
	$(CARGO) +nightly fuzz build --features fuzz-targets
	@failed=""; for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(CURDIR)/fuzz/corpus/$$t; \
	  echo "== fuzz $$t: $(FUZZ_RUNS) runs"; \
	  $(CARGO) +nightly fuzz run --features fuzz-targets $$t $(CURDIR)/fuzz/corpus/$$t $(CURDIR)/fuzz/seeds/$$t -- \
	    -runs=$(FUZZ_RUNS) -max_len=$(FUZZ_MAX_LEN) -print_final_stats=1 || failed="$$failed $$t"; \
	done; \
	if [ -n "$$failed" ]; then echo "fuzz: crashes in:$$failed (inputs under fuzz/artifacts/)"; exit 1; fi; \
	echo "fuzz: $(FUZZ_TARGETS): no crashes in $(FUZZ_RUNS) runs each"

clean:
	$(CARGO) clean
