#!/usr/bin/env bash
# Builds the containerd lines the e2e core runs on besides the embedded 2.4 (holdfast-containerd) and Debian's 1.6,
# from the Go module proxy, and links BIN/containerd-<line> to each:
#   1.7     github.com/containerd/containerd v1.7.35
#   2.2     github.com/containerd/containerd/v2 v2.2.9
#   2.3     github.com/containerd/containerd/v2 v2.3.7
#   k3s-2.3 github.com/k3s-io/containerd/v2 v2.3.2-k3s2 (K3s v1.36's; its go.mod names the module
#           github.com/containerd/containerd/v2)
# 1.7's go.mod has exclude directives and the fork names another module, so `go install` refuses them: each module
# is downloaded, copied somewhere writable and ./cmd/containerd built there as the main module. The fork links its
# btrfs, zfs and stargz snapshotters unconditionally: it is built with cgo and Debian's libbtrfs-dev. The others
# without cgo (no btrfs snapshotter, which the tests do not use).
# Each build lands in $HOME/.cache/holdfast/containerd/<line>-<version>/containerd once; the binary reports the
# version it was built from (`containerd --version`).
# Usage: containerd-lines.sh BIN [LINE...] (default: every line)
set -euo pipefail
bin=$1
shift
declare -A module version pkg cgo
module[1.7]=github.com/containerd/containerd version[1.7]=v1.7.35 pkg[1.7]=github.com/containerd/containerd cgo[1.7]=0
module[2.2]=github.com/containerd/containerd/v2 version[2.2]=v2.2.9 pkg[2.2]=github.com/containerd/containerd/v2 cgo[2.2]=0
module[2.3]=github.com/containerd/containerd/v2 version[2.3]=v2.3.7 pkg[2.3]=github.com/containerd/containerd/v2 cgo[2.3]=0
module[k3s-2.3]=github.com/k3s-io/containerd/v2 version[k3s-2.3]=v2.3.2-k3s2 pkg[k3s-2.3]=github.com/containerd/containerd/v2 cgo[k3s-2.3]=1
lines=("$@")
[ ${#lines[@]} -gt 0 ] || lines=(1.7 2.2 2.3 k3s-2.3)
mkdir -p "$bin"

if [[ " ${lines[*]} " == *" k3s-2.3 "* ]] && [ ! -e /usr/include/btrfs/ioctl.h ]; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		echo "containerd-lines: apt-get install libbtrfs-dev gcc (K3s's containerd links its btrfs snapshotter)" >&2
		export DEBIAN_FRONTEND=noninteractive
		flock /tmp/holdfast-apt.lock apt-get update -qq
		flock /tmp/holdfast-apt.lock apt-get install -y -qq libbtrfs-dev gcc >/dev/null
	else
		echo "containerd-lines: K3s's containerd needs libbtrfs-dev and gcc, and this user cannot apt-get them" >&2
		exit 1
	fi
fi

for line in "${lines[@]}"; do
	[ -n "${module[$line]:-}" ] || { echo "containerd-lines: unknown line $line (want one of ${!module[*]})" >&2; exit 1; }
	v=${version[$line]}
	cache="$HOME/.cache/holdfast/containerd/$line-$v"
	if ! "$cache/containerd" --version 2>/dev/null | grep -q " ${v#v} "; then
		start=$SECONDS
		src=$(GOFLAGS=-mod=mod go mod download -json "${module[$line]}@$v" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
		[ -d "$src" ] || { echo "containerd-lines: downloading ${module[$line]}@$v gave no source dir" >&2; exit 1; }
		work=$(mktemp -d)
		cp -r "$src/." "$work/"
		chmod -R u+w "$work"
		rm -rf "$work/vendor" # built from the module graph, as go.sum pins it
		mkdir -p "$cache"
		(cd "$work" && CGO_ENABLED=${cgo[$line]} GOFLAGS=-mod=mod go build -trimpath -buildvcs=false \
			-ldflags "-s -w -X ${pkg[$line]}/version.Version=${v#v}" -o "$cache/containerd.new" ./cmd/containerd)
		chmod -R u+w "$work"
		rm -rf "$work"
		mv "$cache/containerd.new" "$cache/containerd"
		echo "containerd-lines: containerd $line ($v) built in $((SECONDS - start)) s" >&2
	fi
	ln -sfn "$cache/containerd" "$bin/containerd-$line"
done
