# migrate — see README.md. `make test` is what CI runs.
GO      ?= go
PKGS    := ./...
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
export GOTOOLCHAIN := local

LAB_DIR ?= /tmp/talos-lab
# Where the noisy output of the set-up steps goes; shown only when one fails.
SETUP_LOG ?= $(or $(TMPDIR),/tmp)/migrate-setup.log

.PHONY: build test test-incus-lab race services services-down modules unit lint vet fmt-check depcheck bench fuzz golden demo lab clean

## build: the provider programs, then migrate beside them carrying their sha256 (it runs
## no other: README.md, Provider programs), and the lab: migrate-lab (the lab home server
## and its demo) and the lab's Talos node. tests/buildmigrate builds migrate the same way.
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/ ./cmd/migrate-provider-talos ./cmd/migrate-provider-helm ./cmd/migrate-lab ./lab/cmd/talos-lab
	@talos=$$(sha256sum bin/migrate-provider-talos | cut -d' ' -f1) && helm=$$(sha256sum bin/migrate-provider-helm | cut -d' ' -f1) && \
	test -n "$$talos" -a -n "$$helm" && set -x && \
	$(GO) build -ldflags "$(LDFLAGS) -X main.talosProgramSum=$$talos -X main.helmProgramSum=$$helm" -o bin/ ./cmd/migrate

## test: everything CI checks: formatting, vet, the dependency rules, every
## test, against the real servers the tests need (installed and started here).
test: fmt-check modules vet services
	$(GO) test -count=1 -timeout 30m $(PKGS)
	$(MAKE) --no-print-directory race
	$(MAKE) --no-print-directory test-incus-lab

## test-incus-lab: the Incus suite again, against the lab's Incus host
## (lab/incushost, served by lab/cmd/incus-lab in a fresh directory)
## instead of the real daemon, over HTTPS with a trusted client
## certificate (INCUS_CONF; the client library's own tests use its unix
## socket); what the lab cannot do is skipped, saying
## why (~1 min). Its own TMPDIR: the suite's slot locks are not shared
## with a run against the real daemon.
INCUS_LAB_DIR ?= $(or $(TMPDIR),/tmp)/migrate-incus-lab
test-incus-lab:
	@rm -rf $(INCUS_LAB_DIR) && mkdir -p $(INCUS_LAB_DIR)/tmp
	$(GO) build -o $(INCUS_LAB_DIR)/incus-lab ./lab/cmd/incus-lab
	env -u INCUS_SOCKET -u INCUS_DIR -u INCUS_TEST_IMAGE -u INCUS_TEST_NET_IMAGE TMPDIR=$(INCUS_LAB_DIR)/tmp \
		$(INCUS_LAB_DIR)/incus-lab --dir $(INCUS_LAB_DIR)/host -- $(GO) test -count=1 -timeout 15m ./providers/incus/...

## race: the packages that run goroutines, again under the race detector
## (a concurrency test without it passes even with its lock removed);
## ~22 s once built.
RACE_PKGS := ./engine/ ./state/ ./state/etcdstate/ ./secret/ ./providers/plugin/ ./providers/local/
race:
	$(GO) test -race -count=1 -timeout 10m $(RACE_PKGS)

## modules: download the modules quietly first, so that the test log does
## not start with a page of download lines (shown if the download fails).
modules:
	@$(GO) mod download >$(SETUP_LOG) 2>&1 || { cat $(SETUP_LOG); exit 1; }

## services: install and start the real servers the tests talk to
## (idempotent; needs root for the packages): Incus, and etcd +
## kube-apiserver + kube-controller-manager + kube-scheduler + kwok (built
## once from the module proxy into ~/.cache/migrate: ~6 min the first time),
## Debian's docker-registry, which the OCI chart tests start themselves,
## the Debian root of the lab's old VMs (debootstrap, cached: ~1 min once),
## Debian's samba (smbd, for smb_check's tests and the lab's Samba pod; libnss-wrapper
## gives that pod's smbd its own users)
## and Debian's postgresql-15 (the lab's postgres:15 pods run it).
## Their progress goes to a log, printed only if a script fails.
services:
	@scripts/incus-up.sh >$(SETUP_LOG) 2>&1 || { cat $(SETUP_LOG); echo "make: scripts/incus-up.sh failed (log above)"; exit 1; }
	@scripts/kube-up.sh >$(SETUP_LOG) 2>&1 || { cat $(SETUP_LOG); echo "make: scripts/kube-up.sh failed (log above)"; exit 1; }
	@scripts/registry-up.sh >$(SETUP_LOG) 2>&1 || { cat $(SETUP_LOG); echo "make: scripts/registry-up.sh failed (log above)"; exit 1; }
	@scripts/debian-root.sh >$(SETUP_LOG) 2>&1 || { cat $(SETUP_LOG); echo "make: scripts/debian-root.sh failed (log above)"; exit 1; }
	@scripts/samba-install.sh >$(SETUP_LOG) 2>&1 || { cat $(SETUP_LOG); echo "make: scripts/samba-install.sh failed (log above)"; exit 1; }
	@scripts/postgres-install.sh >$(SETUP_LOG) 2>&1 || { cat $(SETUP_LOG); echo "make: scripts/postgres-install.sh failed (log above)"; exit 1; }

## services-down: stop them.
services-down:
	-scripts/kube-up.sh --down
	-scripts/incus-up.sh --down

unit:
	$(GO) test -count=1 -short $(PKGS)

lint: fmt-check vet

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

depcheck:
	$(GO) test -count=1 ./tests/deps/

## bench: the engine and state figures reported in the issues (see bench/README.md).
bench: services
	$(GO) test -run '^$$' -bench . -benchtime 1x -count 1 ./state/ ./providers/local/
	$(GO) test -run '^$$' -bench Checkpoint -benchtime 2000x -count 1 ./state/etcdstate/
	$(GO) test -run '^$$' -bench 'StopStartCycle|PlanRelease|Evaluate20|SyncFinal|ServiceWindow' -benchtime 5x -count 1 \
		./providers/incus/ ./providers/incus/incusapi/ ./providers/helm/ ./providers/helm/podsecurity/
	$(GO) test -run '^$$' -bench HomelabJellyfinWindow -benchtime 1x -count 1 ./tests/examples/
	$(GO) run ./bench/cmd/enginebench

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzLoad -fuzztime 60s ./runbooks/
	$(GO) test -run '^$$' -fuzz FuzzChunkedParse -fuzztime 60s ./runbooks/
	$(GO) test -run '^$$' -fuzz FuzzGroups -fuzztime 60s ./runbooks/
	$(GO) test -run '^$$' -fuzz FuzzRead -fuzztime 60s ./state/
	$(GO) test -run '^$$' -fuzz FuzzReadLog -fuzztime 60s ./engine/
	$(GO) test -run '^$$' -fuzz FuzzRender -fuzztime 60s ./scaffold/

golden:
	$(GO) test -count=1 ./... -update

## generate: the schemas of the plugin providers (helmschema, talosschema),
## which migrate compiles in, derived again from their step types.
.PHONY: generate
generate:
	$(GO) generate ./providers/...

## demo: migrate-lab demo: the whole move of examples/homelab, driven with
## bin/migrate against the lab home server, a failure, the resumed run, the
## rollback (see README.md).
demo: build
	./bin/migrate-lab demo $(DEMO_FLAGS)

## lab: the lab's Talos node in the foreground (Ctrl-C stops it), in $(LAB_DIR).
lab: build
	./bin/talos-lab --dir $(LAB_DIR)

clean:
	rm -rf bin
