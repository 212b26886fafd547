# migrate — see README.md. `make test` is what CI runs.
GO      ?= go
PKGS    := ./...
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
export GOTOOLCHAIN := local

.PHONY: build test services services-down unit lint vet fmt-check depcheck bench fuzz golden demo clean

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/ ./cmd/migrate ./cmd/migrate-provider-talos ./cmd/migrate-provider-helm

## test: everything CI checks: formatting, vet, the dependency rules, every
## test, against the real servers the tests need (installed and started here).
test: fmt-check vet services
	$(GO) test -count=1 -timeout 30m $(PKGS)

## services: install and start the real servers the tests talk to
## (idempotent; needs root for the packages): Incus, and etcd +
## kube-apiserver + kube-controller-manager (built once from the module
## proxy into ~/.cache/migrate: ~6 min the first time).
services:
	scripts/incus-up.sh >/dev/null
	scripts/kube-up.sh >/dev/null

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
	$(GO) test -count=1 -run TestDependencyDirection ./engine/

## bench: the engine and state figures reported in the issues (see bench/README.md).
bench: services
	$(GO) test -run '^$$' -bench . -benchtime 1x -count 1 ./state/ ./providers/local/
	$(GO) test -run '^$$' -bench 'StopStartCycle|PlanRelease|Evaluate20' -benchtime 5x -count 1 \
		./providers/incus/ ./providers/incus/incusapi/ ./providers/helm/ ./providers/helm/podsecurity/
	$(GO) run ./bench/cmd/enginebench

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzLoad -fuzztime 60s ./runbooks/
	$(GO) test -run '^$$' -fuzz FuzzChunkedParse -fuzztime 60s ./runbooks/
	$(GO) test -run '^$$' -fuzz FuzzRead -fuzztime 60s ./state/

golden:
	$(GO) test -count=1 ./... -update

demo: build
	./bin/migrate run --all --runbook examples/quickstart --auto-approve

clean:
	rm -rf bin
