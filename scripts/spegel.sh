#!/usr/bin/env bash
# Builds spegel, the peer-to-peer registry mirror K3s and RKE2 embed, from the Go module proxy into
# $HOME/.cache/holdfast/spegel/<version> (once) and links BIN/spegel to it. The version is K3s's fork, the one K3s
# ships; its go.mod names the module github.com/spegel-org/spegel, so `go install` refuses it: the module is
# downloaded, copied somewhere writable and built there as the main module. The peer tests
# (test/e2e/peers_test.go) run two of them beside two containerds.
set -euo pipefail
bin=$1 version=${2:-v0.7.2-k3s1}
cache="${HOME}/.cache/holdfast/spegel/${version}"
mkdir -p "$bin" "$cache"
if [ ! -x "$cache/spegel" ]; then
	src=$(GOFLAGS=-mod=mod go mod download -json "github.com/k3s-io/spegel@${version}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	[ -d "$src" ] || { echo "spegel.sh: downloading github.com/k3s-io/spegel@${version} gave no source dir" >&2; exit 1; }
	work=$(mktemp -d)
	trap 'chmod -R u+w "$work"; rm -rf "$work"' EXIT
	cp -r "$src/." "$work/"
	chmod -R u+w "$work"
	(cd "$work" && CGO_ENABLED=0 go build -trimpath -o "$cache/spegel.new" .)
	mv "$cache/spegel.new" "$cache/spegel"
fi
ln -sfn "$cache/spegel" "$bin/spegel"
