#!/usr/bin/env bash
# Installs what the tests need and a fresh machine lacks: Go modules, crictl and
# staticcheck (go install), Debian's containerd 1.6 (the old-version target,
# apt-get), strace and the zstd CLI with pzstd (apt-get).
set -euo pipefail
bin=$1 crictl_version=$2 staticcheck=$3
mkdir -p "$bin"
go mod download
if [ ! -x "$bin/crictl" ]; then
	GOBIN="$bin" go install "sigs.k8s.io/cri-tools/cmd/crictl@${crictl_version}"
fi
if [ ! -x "$bin/staticcheck" ]; then
	GOBIN="$bin" go install "$staticcheck"
fi
apt=()
if ! command -v containerd >/dev/null 2>&1 || ! containerd --version | grep -q ' 1\.6\.'; then
	apt+=(containerd)
fi
# strace: the e2e test of the direct path's sync order traces holdfast.
command -v strace >/dev/null 2>&1 || apt+=(strace)
# zstd: internal/archive checks that the zstd CLI reads the seekable zstd
# holdfast writes; the bench's P9 writes a multi-frame .tar.zst with its pzstd.
{ command -v zstd && command -v pzstd; } >/dev/null 2>&1 || apt+=(zstd)
if [ ${#apt[@]} -gt 0 ]; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		export DEBIAN_FRONTEND=noninteractive
		flock /tmp/holdfast-apt.lock apt-get update -qq
		flock /tmp/holdfast-apt.lock apt-get install -y -qq "${apt[@]}" >/dev/null
	else
		echo "deps: ${apt[*]} not installed and this user cannot apt-get them; make test's preflight will say what that leaves untested" >&2
	fi
fi
