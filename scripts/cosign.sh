#!/usr/bin/env bash
# Builds cosign from the Go module proxy into $HOME/.cache/holdfast/cosign/<version> (once) and links BIN/cosign
# to it. The signature tests (test/e2e/cosign_test.go) sign images with it in a local registry and carry the
# signatures across with cosign save.
set -euo pipefail
bin=$1 version=${2:-v2.6.5}
cache="${HOME}/.cache/holdfast/cosign/${version}"
mkdir -p "$bin" "$cache"
if [ ! -x "$cache/cosign" ]; then
	GOBIN="$cache" CGO_ENABLED=0 go install "github.com/sigstore/cosign/v2/cmd/cosign@${version}"
fi
ln -sfn "$cache/cosign" "$bin/cosign"
