#!/usr/bin/env bash
# Builds cosign v2 and v3 from the Go module proxy into $HOME/.cache/holdfast/cosign/<version> (once each) and
# links BIN/cosign to v2 and BIN/cosign3 to v3. The signature tests sign images with them in a local registry and
# carry the signatures across: v2 (test/e2e/cosign_test.go) as .sig tags, v3 (test/e2e/cosign3_test.go) as sigstore
# bundle referrers.
set -euo pipefail
bin=$1 v2=${2:-v2.6.5} v3=${3:-v3.1.3}
mkdir -p "$bin"
build() { # build VERSION MAJOR LINK: the module path names the major version from v2 on
	local cache="${HOME}/.cache/holdfast/cosign/$1"
	mkdir -p "$cache"
	if [ ! -x "$cache/cosign" ]; then
		GOBIN="$cache" CGO_ENABLED=0 go install "github.com/sigstore/cosign/$2/cmd/cosign@$1"
	fi
	ln -sfn "$cache/cosign" "$bin/$3"
}
build "$v2" v2 cosign
build "$v3" v3 cosign3
