# Tresor's build, test and benchmark entry points. Every target works on a
# fresh machine with Go: modules come from the proxy, and the tests start
# their own nats-server in-process (or, to kill one with SIGKILL, built
# from the module); PostgreSQL tests use TRESOR_TEST_DATABASE_URL.

GO       ?= go
BIN      ?= bin/tresor
DATA     ?= ./tresor-data
# Packages the domain may import besides the standard library.
DOMAIN_ALLOWED := github.com/shopspring/decimal
# TEST_TIMEOUT bounds one package's tests: far above what they take on a
# quiet machine, for a loaded one and for the long targets below.
TEST_TIMEOUT   ?= 60m
BENCH_TIME     ?= 1x

.PHONY: all build run test test-services test-short soak crash crash-storage crash-takeover cluster-repeat sellout bench bench-start bench-backup bench-stop lint fmt vet imports clean

all: lint test

build:
	$(GO) build -o $(BIN) ./cmd/tresor

# run starts Tresor on its embedded default (in-process NATS on $(DATA)).
run: build
	$(BIN) serve --data $(DATA)

# test starts (or installs) PostgreSQL, RabbitMQ and chromium first, as
# .ci/run does (scripts/test-services.sh), so that it passes on a fresh
# machine by itself.
export TRESOR_TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable
export TRESOR_TEST_AMQP_URL ?= amqp://guest:guest@127.0.0.1:5672/

# test runs every package's tests, the long ones at a bounded size: the
# crash suite's 5 cycles, a few storage faults, one takeover fault and one
# start, one sold-out block, 5 000 plays of the block report. soak runs
# them all at length (crash, crash-storage, crash-takeover, sellout).
# cmd/tresor's tests run in parallel, except those that stop, freeze or
# time a cluster, bound a deadline or set the environment: they run alone.
# Three packages run at once (-p 3, where Go's default is one per core):
# cmd/tresor's tests that run alone mostly wait on clusters, and the other
# packages use the cores meanwhile.
test: test-services
	$(GO) test -count=1 -p 3 -timeout $(TEST_TIMEOUT) ./...

soak: crash sellout

test-services:
	scripts/test-services.sh

test-short:
	$(GO) test -short -count=1 ./...

# crash runs the crash suite at length: concurrent HTTP clients against the
# real binary, killed with SIGKILL and restarted TRESOR_CRASH_CYCLES times;
# every acknowledged write is checked against an export of the stream after
# each kill. `make test` runs it with 5 cycles. TRESOR_CRASH_CLIENTS sets the
# clients (16), TRESOR_CRASH_SEED replays a run's choices; the figures are
# the last line.
TRESOR_CRASH_CYCLES ?= 20
crash: crash-storage crash-takeover
	TRESOR_CRASH_CYCLES=$(TRESOR_CRASH_CYCLES) $(GO) test -count=1 -v -timeout $(TEST_TIMEOUT) \
		-run '^TestCrashKeepsEveryAcknowledgedWrite$$' ./cmd/tresor

# crash-storage damages the newest block file of a stream killed under load
# in every way the storage-fault suite knows (make test picks a few, by the
# run's seed), and tears the last append of each shape, TRESOR_STORAGE_RUNS
# times, each with a seed and a kill of its own; then one replica's block
# file of a three-node cluster, in each way and role (make test runs two).
TRESOR_STORAGE_RUNS ?= 5
crash-storage:
	TRESOR_STORAGE_FAULTS=all $(GO) test -count=$(TRESOR_STORAGE_RUNS) -v -timeout $(TEST_TIMEOUT) \
		-run '^TestStorageFault' ./cmd/tresor
	TRESOR_STORAGE_FAULTS=all $(GO) test -count=1 -v -timeout $(TEST_TIMEOUT) \
		-run '^TestADamagedReplicaLosesNoAcknowledgedEvent$$' ./eventstore

# crash-takeover runs three `tresor serve` on three nats-server processes
# under the crash suite's clients: kill -9 of the NATS node leading the
# stream and a rolling restart of the serves, TRESOR_TAKEOVER_FAULTS times
# each (make test: once), a rolling restart of the NATS nodes, then
# TRESOR_TAKEOVER_STARTS starts of a serve (make test: 1); the takeover
# figures are in its log.
TRESOR_TAKEOVER_FAULTS ?= 5
TRESOR_TAKEOVER_STARTS ?= 50
crash-takeover:
	TRESOR_TAKEOVER_FAULTS=$(TRESOR_TAKEOVER_FAULTS) TRESOR_TAKEOVER_STARTS=$(TRESOR_TAKEOVER_STARTS) \
		$(GO) test -count=1 -v -timeout $(TEST_TIMEOUT) -run '^TestTakeoverOnNATSProcesses$$' ./cmd/tresor

# cluster-repeat runs one set of the cluster tests REPEAT_RUNS times, each
# run a fresh process of a test binary built once, one after the other, and
# prints each run's outcome and wall time, then the tally
# (scripts/repeat-tests.sh): REPEAT_SET=cluster (the ./cluster package),
# tresor (cmd/tresor's cluster tests, at make test's sizes) or eventstore
# (the lease, leader and node-name tests). A failing run's log is kept
# under .runs/. The cluster tests must pass every run.
REPEAT_SET  ?= cluster
REPEAT_RUNS ?= 20
cluster-repeat:
	scripts/repeat-tests.sh $(REPEAT_SET) $(REPEAT_RUNS)

# sellout sells out a block of each price of SELLOUT_PRICES through the
# writer and checks each pays its Article 3 table to the cent (make test
# sells out one, at 0.50), then a block of each with `tresor simulate` and
# checks `tresor report blocks` against Article 3 (make test: 5 000 plays,
# checked against the plays).
SELLOUT_PRICES ?= 0.50,1,2
sellout:
	TRESOR_SELLOUT_PRICES=$(SELLOUT_PRICES) $(GO) test -count=1 -v -timeout $(TEST_TIMEOUT) \
		-run '^TestSellOutOfABlockOfEachPricePaysArticle3$$' ./settlement
	TRESOR_SELLOUT_PRICES=$(SELLOUT_PRICES) $(GO) test -count=1 -v -timeout $(TEST_TIMEOUT) \
		-run '^TestSoldOutBlockReportMatchesArticle3$$' ./cmd/tresor

# bench runs every Go benchmark once at its natural size; the figures are
# quoted in docs/performance.md. BENCH=regex narrows it.
bench:
	$(GO) test -run '^$$' -bench '$(or $(BENCH),.)' -benchtime $(BENCH_TIME) -benchmem -timeout 60m ./...

# bench-start times serve's start to ready after 1..BLOCKS sold-out blocks,
# with and without snapshots (scripts/bench-start.sh; long: minutes a block).
BLOCKS ?= 1
bench-start:
	BIN=$(BIN) scripts/bench-start.sh $(BLOCKS)

# bench-backup measures backup and restore over one sold-out block (450 000
# plays), each against its yardstick in the same run, and the time to
# recover (restore, then serve ready); long: a sell-out, a replay, a backup
# and a restore of the whole block. make bench runs it on a smaller
# stream (the size is in its recipe).
# BACKUP_DATA=DIR measures a data directory already sold out instead.
BACKUP_PLAYS ?= 450000
BACKUP_DATA  ?=
bench-backup:
	TRESOR_BACKUP_BENCH_PLAYS=$(BACKUP_PLAYS) TRESOR_BACKUP_BENCH_DATA=$(BACKUP_DATA) $(GO) test -run '^$$' -bench '^BenchmarkBackupAndRestore$$' -benchtime 1x \
		-timeout $(TEST_TIMEOUT) -v ./cmd/tresor

# bench-stop times serve's stop after a 182 000-play stream, the writer's
# closing snapshot with it (scripts/bench-stop.sh; RUNS stops).
RUNS ?= 4
bench-stop: build
	BIN=$(BIN) scripts/bench-stop.sh $(RUNS)

lint: fmt vet imports

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go') 2>/dev/null); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

# imports keeps the dependency rule: domain and domain/codec
# import only the standard library (and decimal, and codec domain); eventstore and projections never import
# each other; web imports only domain; nothing imports cmd; the finance
# feed reads the stream through eventstore and domain only, never a read
# model or the writer; the cluster does not import the API; snapshot
# imports only eventstore of Tresor's packages (what a snapshot holds is
# its owner's format, never its own); the regulator's vault reads through
# eventstore and audit, never the write side; personal (the data keys)
# imports only domain and eventstore of Tresor's packages.
imports:
	@bad=$$($(GO) list -deps -f '{{if not .Standard}}{{.ImportPath}}{{end}}' ./domain ./domain/codec | \
		grep -v -x -e 'github.com/fdj/tresor/domain' -e 'github.com/fdj/tresor/domain/codec' $(foreach p,$(DOMAIN_ALLOWED),-e '$(p)') || true); \
	if [ -n "$$bad" ]; then echo "domain or its codec imports more than the standard library:"; echo "$$bad"; exit 1; fi
	@if $(GO) list -deps ./eventstore/... | grep -q '^github.com/fdj/tresor/projections'; then \
		echo "eventstore imports projections"; exit 1; fi
	@if [ -d projections ] && $(GO) list -deps ./projections/... 2>/dev/null | grep -q '^github.com/fdj/tresor/eventstore'; then \
		echo "projections imports eventstore"; exit 1; fi
	@bad=$$($(GO) list -deps -f '{{if not .Standard}}{{.ImportPath}}{{end}}' ./web | \
		grep -v -x -e 'github.com/fdj/tresor/web' -e 'github.com/fdj/tresor/domain' $(foreach p,$(DOMAIN_ALLOWED),-e '$(p)') || true); \
	if [ -n "$$bad" ]; then echo "web imports more than domain (its pages call the API like any client):"; echo "$$bad"; exit 1; fi
	@if $(GO) list -f '{{join .Imports "\n"}}' ./... | grep -q '^github.com/fdj/tresor/cmd'; then \
		echo "a package imports cmd"; exit 1; fi
	@if [ -d feed ] && $(GO) list -deps ./feed/... | grep -E -q '^github.com/fdj/tresor/(projections|api|settlement|audit)(/|$$)'; then \
		echo "feed imports projections, api, settlement or audit (it reads the stream through eventstore, builds with domain)"; exit 1; fi
	@if $(GO) list -deps ./cluster | grep -q '^github.com/fdj/tresor/api$$'; then \
		echo "cluster imports api (its writer side speaks settlement's errors)"; exit 1; fi
	@bad=$$($(GO) list -deps -f '{{.ImportPath}}' ./snapshot | grep '^github.com/fdj/tresor/' | \
		grep -v -x -e 'github.com/fdj/tresor/snapshot' -e 'github.com/fdj/tresor/eventstore' || true); \
	if [ -n "$$bad" ]; then echo "snapshot imports more of Tresor than eventstore:"; echo "$$bad"; exit 1; fi
	@if [ -d vault ] && $(GO) list -deps ./vault | grep -E -q '^github.com/fdj/tresor/(settlement|api|cluster|feed|snapshot)(/|$$)'; then \
		echo "vault imports the write side (settlement, api, cluster, feed or snapshot): it checks the operator's code, it does not run it"; exit 1; fi
	@bad=$$($(GO) list -deps -f '{{.ImportPath}}' ./personal | grep '^github.com/fdj/tresor/' | \
		grep -v -x -e 'github.com/fdj/tresor/personal' -e 'github.com/fdj/tresor/domain' -e 'github.com/fdj/tresor/eventstore' || true); \
	if [ -n "$$bad" ]; then echo "personal imports more of Tresor than domain and eventstore:"; echo "$$bad"; exit 1; fi
	@echo "imports: ok"

clean:
	rm -rf bin
