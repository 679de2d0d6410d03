# holdfast — `make demo` runs the main job on the embedded containerd; `make test` runs every test.
# Both install what they need on a fresh Debian 12 machine (Go modules, go-installed tools, apt packages).

GO                 ?= go
VERSION            ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
CONTAINERD_VERSION := $(shell $(GO) list -m -f '{{.Version}}' github.com/containerd/containerd/v2 2>/dev/null | sed 's/^v//')
LDFLAGS            := -s -w -X main.version=$(VERSION)
CONTAINERD_LDFLAGS := -s -w -X github.com/containerd/containerd/v2/version.Version=$(CONTAINERD_VERSION)
BIN                := $(CURDIR)/bin
CRICTL_VERSION     := v1.37.0
STATICCHECK        := honnef.co/go/tools/cmd/staticcheck@v0.8.2
DEMO_DIR           ?= /tmp/holdfast-demo
TEST_TIMEOUT       ?= 25m
# HOLDFAST_TEST_SKIP: parts of the suite this machine may go without, comma-separated: root, containerd-1.6,
# crictl, overlayfs. A part that is missing and not listed fails `make test` (preflight) and the tests that need it.
HOLDFAST_TEST_SKIP ?=
export HOLDFAST_TEST_SKIP

export GOFLAGS := -buildvcs=false

.PHONY: build demo test lint deps preflight unit e2e mutants clean

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/holdfast ./cmd/holdfast
	$(GO) build -trimpath -ldflags '$(CONTAINERD_LDFLAGS)' -o $(BIN)/holdfast-containerd ./cmd/holdfast-containerd
	$(GO) build -trimpath -o $(BIN)/imagegen ./cmd/imagegen

demo: build
	bash scripts/demo.sh "$(BIN)" "$(DEMO_DIR)"

# deps: what the end-to-end suite uses besides holdfast itself (helm: the chart tests, test/chart).
deps:
	bash scripts/deps.sh "$(BIN)" "$(CRICTL_VERSION)" "$(STATICCHECK)"
	bash scripts/helm.sh "$(BIN)"

lint: deps
	@out=$$(gofmt -l cmd internal test bench 2>/dev/null); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(BIN)/staticcheck ./...

# preflight: fails, naming what is missing, unless HOLDFAST_TEST_SKIP lists it (scripts/preflight.sh).
preflight: deps
	bash scripts/preflight.sh "$(BIN)"

test: preflight lint
	PATH="$(BIN):$$PATH" HOLDFAST_CONTAINERD_VERSION=$(CONTAINERD_VERSION) \
		$(GO) test -timeout $(TEST_TIMEOUT) -count=1 ./...
	$(MAKE) demo

# mutants: breaks safety-critical lines one at a time in a copy of the tree (test/mutants) and checks that
# the tests named for each fail; exits non-zero on a survivor or a sabotage whose text is gone. Not part of test.
MUTANTS_FLAGS ?=
mutants: preflight
	PATH="$(BIN):$$PATH" HOLDFAST_CONTAINERD_VERSION=$(CONTAINERD_VERSION) \
		$(GO) run ./test/mutants $(MUTANTS_FLAGS)

unit:
	$(GO) test -short -count=1 ./internal/...

# bench: holdfast side by side with ctr and the machine's floor (bench/, docs/benchmarks.md); writes
# bench/results/latest.json. BENCH_FLAGS=-quick for a one-minute smoke run; see -h for the rest.
BENCH_FLAGS ?=

.PHONY: bench
bench: build
	$(GO) build -trimpath -ldflags '$(CONTAINERD_LDFLAGS)' -o $(BIN)/ctr github.com/containerd/containerd/v2/cmd/ctr
	$(GO) run ./bench/cmd/holdfast-bench -holdfast $(BIN)/holdfast -ctr $(BIN)/ctr $(BENCH_FLAGS)

clean:
	rm -rf $(BIN)
