#!/usr/bin/env bash
# Builds cyclonedx-gomod, the CycloneDX generator that reads the build info of a Go binary (the modules actually
# linked), from the Go module proxy into $HOME/.cache/holdfast/cyclonedx-gomod/<version> (once) and links
# BIN/cyclonedx-gomod to it. tools/sbom runs it for each binary of a release (`make release`) and in its tests.
set -euo pipefail
bin=$1 version=${2:-v1.10.0}
cache="${HOME}/.cache/holdfast/cyclonedx-gomod/${version}"
mkdir -p "$bin" "$cache"
if [ ! -x "$cache/cyclonedx-gomod" ]; then
	GOBIN="$cache" CGO_ENABLED=0 go install "github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@${version}"
fi
ln -sfn "$cache/cyclonedx-gomod" "$bin/cyclonedx-gomod"
