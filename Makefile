# holdfast — `make demo` runs the main job on the embedded containerd; `make test` runs every test.
# Both install what they need on a fresh Debian 12 machine (Go modules, go-installed tools, apt packages).

GO                 ?= go
VERSION            ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
CONTAINERD_VERSION := $(shell $(GO) list -m -f '{{.Version}}' github.com/containerd/containerd/v2 2>/dev/null | sed 's/^v//')
LDFLAGS             = -s -w -X main.version=$(VERSION) -X main.commit=$(REVISION)
REPORTER_LDFLAGS    = -s -w -X main.version=$(VERSION) -X main.commit=$(REVISION)
CONTAINERD_LDFLAGS := -s -w -X github.com/containerd/containerd/v2/version.Version=$(CONTAINERD_VERSION)
BIN                := $(CURDIR)/bin
CRICTL_VERSION     := v1.37.0
# cosign: v2 (signatures as .sig tags, linked as bin/cosign) and v3 (sigstore bundles as referrers, bin/cosign3).
COSIGN_VERSION     := v2.6.5
COSIGN3_VERSION    := v3.1.3
# cyclonedx-gomod: the generator of the release's SBOMs (tools/sbom, scripts/sbom.sh), linked as bin/cyclonedx-gomod.
CYCLONEDX_GOMOD_VERSION := v1.10.0
STATICCHECK        := honnef.co/go/tools/cmd/staticcheck@v0.8.2
DEMO_DIR           ?= /tmp/holdfast-demo
# image: holdfast's own image (tools/mkimage), reproducible from the commit: its time is the commit's.
IMAGE_REPO         ?= ghcr.io/holdfast-project/holdfast
IMAGE_SOURCE       ?= https://github.com/holdfast-project/holdfast
IMAGE_ARCHES       ?= amd64 arm64
# spegel: K3s's fork, built from its module (scripts/spegel.sh); its build info names no version, the SBOM does.
SPEGEL_VERSION     := v0.7.2-k3s1
IMAGE_CMDS         := $(notdir $(wildcard cmd/holdfast cmd/holdfast-reporter))
SOURCE_DATE_EPOCH  ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
REVISION           ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
TEST_TIMEOUT       ?= 25m
# The one-node cluster test's Kubernetes binaries (scripts/cluster-deps.sh builds them from test/cluster/tools).
K8S_VERSION        := v1.36.3
HOLDFAST_CLUSTER_BIN ?= $(HOME)/.cache/holdfast/cluster/$(K8S_VERSION)/bin
export HOLDFAST_CLUSTER_BIN
# HOLDFAST_TEST_SKIP: parts of the suite this machine may go without, comma-separated: root, containerd-1.6,
# containerd-lines, crictl, cosign, spegel, zstd, overlayfs, cluster, sbom. A part that is missing and not listed fails `make test` (preflight) and the tests that need it.
HOLDFAST_TEST_SKIP ?=
export HOLDFAST_TEST_SKIP

# One set of build flags for every build, vet, staticcheck and test of the module: a package compiled with another
# -trimpath or CGO_ENABLED is compiled again (and so is everything above it), which on a cold machine doubles the
# compiling. Everything is built without cgo: holdfast and the reporter are static for their image, and so is the
# embedded containerd (no btrfs snapshotter, no PKCS#11 image decryption: README, Install).
export GOFLAGS := -buildvcs=false -trimpath
export CGO_ENABLED := 0
HOST_ARCH := $(shell $(GO) env GOARCH)

.PHONY: build demo test test-go lint deps preflight unit e2e mutants clean image fuzz docs release

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/holdfast ./cmd/holdfast
	$(GO) build -ldflags '$(REPORTER_LDFLAGS)' -o $(BIN)/holdfast-reporter ./cmd/holdfast-reporter
	$(GO) build -ldflags '$(CONTAINERD_LDFLAGS)' -o $(BIN)/holdfast-containerd ./cmd/holdfast-containerd
	$(GO) build -o $(BIN)/imagegen ./tools/imagegen

# image: $(BIN)/holdfast-image.tar, an OCI image layout tar (linux/amd64 + linux/arm64) named
# $(IMAGE_REPO):$(VERSION), for `holdfast import`, `ctr images import` or a K3s/RKE2 images dir;
# $(BIN)/holdfast-image.name holds the name. The same commit gives the same digest. Beside holdfast's binaries it
# holds /spegel, the peer-to-peer registry mirror the chart runs with peers.enabled (scripts/spegel.sh builds it
# from the Go module, once per architecture).
image: build
	@set -e; for arch in $(IMAGE_ARCHES); do for cmd in $(IMAGE_CMDS); do \
		echo "building $$cmd for linux/$$arch"; \
		GOOS=linux GOARCH=$$arch $(GO) build -ldflags '$(LDFLAGS)' \
			-o $(BIN)/linux_$$arch/$$cmd ./cmd/$$cmd; \
	done; \
	echo "building spegel for linux/$$arch"; GOOS=linux GOARCH=$$arch bash scripts/spegel.sh $(BIN)/linux_$$arch $(SPEGEL_VERSION); \
	done
	$(GO) build -o $(BIN)/mkimage ./tools/mkimage
	$(BIN)/mkimage -o $(BIN)/holdfast-image.tar -name-out $(BIN)/holdfast-image.name \
		-repo $(IMAGE_REPO) -version $(VERSION) -revision $(REVISION) -source $(IMAGE_SOURCE) \
		-epoch $(SOURCE_DATE_EPOCH) $(foreach c,$(IMAGE_CMDS) spegel,-bin $(c)) \
		$(foreach a,$(IMAGE_ARCHES),-platform linux/$(a)=$(BIN)/linux_$(a))

# release: $(DIST) (default dist/): the image archive of `make image` with its SBOM and cosign v3 signatures as OCI
# referrers of the image (holdfast-image-V.tar), the chart packaged with image.digest set to the image's
# (holdfast-V.tgz), the SBOMs (sbom/), a Hauler manifest and a Zarf package definition, SHA256SUMS, the sigstore
# bundles of the chart and of SHA256SUMS, and the release's public key; V is VERSION without a leading v. It signs
# with the cosign private key RELEASE_KEY=FILE or the PEM in $HOLDFAST_RELEASE_KEY (password: $COSIGN_PASSWORD),
# and refuses with neither, unless UNSIGNED=1: then the files that would be signed are named -unsigned. The same
# commit and key give the same files but the signatures (tools/release says which). Needs bin/cosign3 and bin/helm
# (make deps-cosign deps-helm), or HELM= and COSIGN3= naming them.
DIST        ?= dist
RELEASE_KEY ?=
UNSIGNED    ?=
HELM        ?= $(BIN)/helm
COSIGN3     ?= $(BIN)/cosign3
release:
	@if [ -z "$(UNSIGNED)" ] && [ -z "$(RELEASE_KEY)" ] && [ -z "$$HOLDFAST_RELEASE_KEY" ]; then \
		echo "make release: no release key: set RELEASE_KEY=FILE (a cosign private key) or HOLDFAST_RELEASE_KEY (the key's PEM), or UNSIGNED=1 for a release named -unsigned" >&2; exit 1; fi
	@$(MAKE) --no-print-directory image
	rm -rf "$(DIST)/sbom" "$(DIST)"/holdfast-image-*.tar "$(DIST)"/holdfast-*.tgz "$(DIST)"/holdfast-*.tgz.sigstore.json \
		"$(DIST)/holdfast-release.pub" "$(DIST)"/SHA256SUMS* "$(DIST)/hauler-manifest.yaml" "$(DIST)/zarf.yaml"
	mkdir -p "$(DIST)/sbom"
	$(GO) run ./tools/sbom -o "$(DIST)/sbom" -image-name "$$(cat $(BIN)/holdfast-image.name)" \
		-image-digest "$$(tar -xOf $(BIN)/holdfast-image.tar index.json | sed -n 's/.*"digest":"\(sha256:[0-9a-f]*\)".*/\1/p')" \
		-gomod go.mod -epoch $(SOURCE_DATE_EPOCH) $(foreach a,$(IMAGE_ARCHES),-bin linux/$(a)=$(BIN)/linux_$(a)) \
		$(foreach c,$(IMAGE_CMDS) spegel,-cmd $(c)) -version spegel=$(SPEGEL_VERSION)
	$(GO) run ./tools/release -dist "$(DIST)" -version "$(VERSION)" -image $(BIN)/holdfast-image.tar \
		-sbom "$(DIST)/sbom" -chart deploy/helm/holdfast -helm "$(HELM)" -cosign "$(COSIGN3)" -epoch $(SOURCE_DATE_EPOCH) \
		$(if $(RELEASE_KEY),-key "$(RELEASE_KEY)") $(if $(UNSIGNED),-unsigned)

demo: build
	bash scripts/demo.sh "$(BIN)" "$(DEMO_DIR)"

# deps: what the end-to-end suite uses besides holdfast itself (helm: the chart tests, test/chart; cosign v2 and v3:
# the signature tests; spegel: the peer tests; cyclonedx-gomod: the SBOM tests, tools/sbom; containerd 1.7, 2.2,
# 2.3 and K3s's fork: the e2e core's matrix).
# Three at a time: on a cold machine one part's module downloads overlap another's compiling (the scripts take
# turns at apt-get); each part's output is printed when it ends. Nothing to do when all are cached.
# Longest first: the cluster tools and the containerd lines take most of a cold run.
DEPS_PARTS := deps-cluster deps-lines deps-cosign deps-helm deps-base deps-spegel deps-sbom
deps:
	@$(MAKE) --no-print-directory -j3 --output-sync=target $(DEPS_PARTS)
# timed PART CMD...: runs CMD, then says how long it took and the CPU time it used.
timed = bash -c 'TIMEFORMAT="$$0: %0R s, %0U+%0S CPU-s"; time "$$@"'
deps-base:
	@$(timed) $@ bash scripts/deps.sh "$(BIN)" "$(CRICTL_VERSION)" "$(STATICCHECK)"
deps-cluster:
	@$(timed) $@ bash scripts/cluster-deps.sh "$(BIN)" "$(HOLDFAST_CLUSTER_BIN)"
deps-helm:
	@$(timed) $@ bash scripts/helm.sh "$(BIN)"
deps-cosign:
	@$(timed) $@ bash scripts/cosign.sh "$(BIN)" "$(COSIGN_VERSION)" "$(COSIGN3_VERSION)"
deps-spegel:
	@$(timed) $@ bash scripts/spegel.sh "$(BIN)" "$(SPEGEL_VERSION)"
deps-sbom:
	@$(timed) $@ bash scripts/sbom.sh "$(BIN)" "$(CYCLONEDX_GOMOD_VERSION)"
deps-lines:
	@$(timed) $@ bash scripts/containerd-lines.sh "$(BIN)"
.PHONY: $(DEPS_PARTS)

lint: deps-base
	@out=$$(gofmt -l cmd internal test tools 2>/dev/null); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(BIN)/staticcheck ./...

# preflight: fails, naming what is missing, unless HOLDFAST_TEST_SKIP lists it (scripts/preflight.sh).
preflight: deps
	bash scripts/preflight.sh "$(BIN)"

# test: first the parts of make deps, the build and the image, three at a time (the longest first: on a cold machine
# one part's downloads overlap another's compiling), then the preflight, then the suite and the lint side by side
# (the suite waits on containerds and clusters more than it computes), then the demo. The image is the host's
# platform only (the suite loads no other; `make image` builds both for a release). Each step says when it ended,
# in seconds since make test started.
TEST_PARTS := deps-cluster deps-lines build deps-cosign deps-helm deps-base deps-spegel deps-sbom image
test: export HOLDFAST_TEST_START := $(or $(HOLDFAST_TEST_START),$(shell date +%s))
test:
	@$(MAKE) --no-print-directory -j3 --output-sync=target IMAGE_ARCHES=$(HOST_ARCH) $(TEST_PARTS)
	@echo "make test: deps, build and image done at $$(( $$(date +%s) - $$HOLDFAST_TEST_START )) s"
	bash scripts/preflight.sh "$(BIN)"
	@$(MAKE) --no-print-directory -j2 --output-sync=target test-go lint
	@echo "make test: suite and lint done at $$(( $$(date +%s) - $$HOLDFAST_TEST_START )) s"
	@$(MAKE) --no-print-directory demo
	@echo "make test: demo done at $$(( $$(date +%s) - $$HOLDFAST_TEST_START )) s"

test-go:
	PATH="$(BIN):$$PATH" HOLDFAST_CONTAINERD_VERSION=$(CONTAINERD_VERSION) HOLDFAST_BIN=$(BIN) \
		$(GO) test -timeout $(TEST_TIMEOUT) -count=1 ./...

# mutants: breaks safety-critical lines one at a time in a copy of the tree (test/mutants) and checks that
# the tests named for each fail; exits non-zero on a survivor or a sabotage whose text is gone. Not part of test.
MUTANTS_FLAGS ?=
mutants: preflight
	PATH="$(BIN):$$PATH" HOLDFAST_CONTAINERD_VERSION=$(CONTAINERD_VERSION) \
		$(GO) run ./test/mutants $(MUTANTS_FLAGS)

# soak: `holdfast run` under random churn for DURATION, checking holdfast's invariants after every step and the
# agent's RSS, goroutines and open files for growth (test/e2e/soak_test.go, build tag soak); with it CRASH_TRIALS
# SIGKILL trials (TestCrashTrials) and a one-minute containerd outage (TestContainerdOutage). The figures go to
# SOAK_REPORT (JSON). Not part of test: `make test` runs 4 crash trials and a 10 s outage.
DURATION     ?= 30m
CRASH_TRIALS ?= 50
SOAK_REPORT  ?= $(BIN)/soak.json
SOAK_TIMEOUT ?= 3h

.PHONY: soak
soak: preflight
	PATH="$(BIN):$$PATH" HOLDFAST_CONTAINERD_VERSION=$(CONTAINERD_VERSION) HOLDFAST_SOAK=$(DURATION) \
		HOLDFAST_CRASH_TRIALS=$(CRASH_TRIALS) HOLDFAST_SOAK_REPORT=$(SOAK_REPORT) \
		$(GO) test -tags soak -timeout $(SOAK_TIMEOUT) -count=1 -v -run 'TestSoak|TestCrashTrials|TestContainerdOutage' ./test/e2e

unit:
	$(GO) test -short -count=1 ./internal/...

# docs: writes docs/commands.md again from the commands' help (internal/cmddoc); TestCommandsDocUpToDate
# fails while it is stale.
docs:
	HOLDFAST_UPDATE_DOCS=1 $(GO) test ./internal/cli -run TestCommandsDocUpToDate -count=1

# fuzz: each native fuzz target (go test -list 'Fuzz.*' per package) in turn for FUZZTIME; FUZZ_PKGS narrows
# it to some packages. Plain `go test` (make test) runs the committed seeds of testdata/fuzz/ only.
FUZZTIME  ?= 1m
FUZZ_PKGS ?=
fuzz:
	bash scripts/fuzz.sh $(FUZZTIME) $(FUZZ_PKGS)

# bench: holdfast side by side with ctr and the machine's floor (test/bench/, docs/benchmarks.md); writes
# test/bench/results/latest.json. BENCH_FLAGS=-quick for a one-minute smoke run; see -h for the rest.
BENCH_FLAGS ?=

.PHONY: bench
bench: build
	$(GO) build -trimpath -ldflags '$(CONTAINERD_LDFLAGS)' -o $(BIN)/ctr github.com/containerd/containerd/v2/cmd/ctr
	$(GO) run ./test/bench/cmd/holdfast-bench -holdfast $(BIN)/holdfast -ctr $(BIN)/ctr $(BENCH_FLAGS)

clean:
	rm -rf $(BIN)
