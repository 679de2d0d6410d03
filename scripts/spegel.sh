#!/usr/bin/env bash
# Builds spegel, the peer-to-peer registry mirror K3s and RKE2 embed, from the Go module proxy and links
# BIN/spegel to it. The version is K3s's fork, the one K3s ships; its go.mod names the module
# github.com/spegel-org/spegel, so `go install` refuses it: the module is downloaded, copied somewhere writable and
# built there as the main module.
#
# With GOOS and GOARCH unset: a build for this machine, in $HOME/.cache/holdfast/spegel/<version>/spegel, which the
# peer tests (test/e2e/peers_test.go) run beside two containerds. With GOOS and GOARCH set (`make image`): a static,
# stripped build for that platform, in $HOME/.cache/holdfast/spegel/<version>/<goos>_<goarch>/spegel, packed into
# holdfast's image. Each is built once; the build is reproducible (-trimpath, no VCS stamp, no cgo).
set -euo pipefail
bin=$1 version=${2:-v0.7.2-k3s1}
cache="${HOME}/.cache/holdfast/spegel/${version}"
ldflags=()
if [ -n "${GOOS:-}" ] || [ -n "${GOARCH:-}" ]; then
	[ -n "${GOOS:-}" ] && [ -n "${GOARCH:-}" ] || { echo "spegel.sh: set both GOOS and GOARCH, or neither" >&2; exit 1; }
	export GOOS GOARCH
	cache="${cache}/${GOOS}_${GOARCH}"
	ldflags=(-ldflags '-s -w')
fi
mkdir -p "$bin" "$cache"
if [ ! -x "$cache/spegel" ]; then
	src=$(GOOS= GOARCH= GOFLAGS=-mod=mod go mod download -json "github.com/k3s-io/spegel@${version}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	[ -d "$src" ] || { echo "spegel.sh: downloading github.com/k3s-io/spegel@${version} gave no source dir" >&2; exit 1; }
	work=$(mktemp -d)
	trap 'chmod -R u+w "$work"; rm -rf "$work"' EXIT
	cp -r "$src/." "$work/"
	chmod -R u+w "$work"
	(cd "$work" && CGO_ENABLED=0 go build -trimpath -buildvcs=false "${ldflags[@]}" -o "$cache/spegel.new" .)
	mv "$cache/spegel.new" "$cache/spegel"
fi
ln -sfn "$cache/spegel" "$bin/spegel"
