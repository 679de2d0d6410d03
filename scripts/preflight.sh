#!/usr/bin/env bash
# Checks that this machine has what `make test` exercises: root (the e2e and
# embedded tests start containerd), Debian's containerd 1.6 (the old-version
# target), crictl, the zstd CLI, and the one-node cluster's tools (scripts/cluster-deps.sh).
# Each missing part fails the run unless HOLDFAST_TEST_SKIP (comma-separated:
# root,containerd-1.6,containerd-lines,crictl,zstd,cosign,spegel,cluster,sbom) lists it; the tests then skip that part,
# saying so.
set -uo pipefail
bin=$1
export PATH="$bin:$PATH"
skip=",${HOLDFAST_TEST_SKIP:-},"
missing=()

need() { # need PART WHY: a missing part, unless listed
	if [[ $skip == *",$1,"* ]]; then
		echo "preflight: skipping $1 on purpose (HOLDFAST_TEST_SKIP): $2" >&2
	else
		missing+=("$1")
		echo "preflight: missing $1: $2" >&2
	fi
}

[ "$(id -u)" = 0 ] || need root "not running as root: the end-to-end and embedded tests start containerd and mount overlays"
if ! command -v containerd >/dev/null 2>&1; then
	need containerd-1.6 "no containerd on PATH: the old-containerd tests need Debian's containerd 1.6 (make deps installs it with apt-get)"
elif ! containerd --version | grep -q ' 1\.6\.'; then
	need containerd-1.6 "$(command -v containerd) is not containerd 1.6: $(containerd --version)"
fi
lines_missing=()
for l in 1.7:1.7.35 2.2:2.2.9 2.3:2.3.7 k3s-2.3:2.3.2-k3s2; do
	"containerd-${l%%:*}" --version 2>/dev/null | grep -q " ${l#*:} " || lines_missing+=("containerd-${l%%:*} (${l#*:})")
done
[ ${#lines_missing[@]} -eq 0 ] || need containerd-lines "the e2e core's containerd lines are missing: ${lines_missing[*]} (make deps builds them: scripts/containerd-lines.sh)"
command -v crictl >/dev/null 2>&1 || need crictl "crictl is not in $bin or on PATH (make deps installs it)"
{ command -v zstd && command -v pzstd; } >/dev/null 2>&1 || need zstd "the zstd CLI or its pzstd is not on PATH: internal/archive checks that zstd -d reads the seekable zstd holdfast writes and decodes pzstd's frames; the bench's P9 writes with pzstd (make deps installs both with apt-get)"
for c in cosign cosign3; do # cosign v2 and v3, one part
	command -v "$c" >/dev/null 2>&1 || need cosign "$c is not in $bin or on PATH (make deps builds it: scripts/cosign.sh)"
done
command -v spegel >/dev/null 2>&1 || need spegel "spegel is not in $bin or on PATH (make deps builds it: scripts/spegel.sh)"
command -v cyclonedx-gomod >/dev/null 2>&1 || need sbom "cyclonedx-gomod is not in $bin or on PATH: tools/sbom's tests make SBOMs with it (make deps builds it: scripts/sbom.sh)"
command -v ip >/dev/null 2>&1 || need spegel "ip (iproute2) is not on PATH: the peer tests put two nodes in a network namespace"
cluster_bin=${HOLDFAST_CLUSTER_BIN:-$HOME/.cache/holdfast/cluster/v1.36.3/bin}
cluster_missing=()
for b in etcd kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubectl kubelet coredns pause; do
	[ -x "$cluster_bin/$b" ] || cluster_missing+=("$cluster_bin/$b")
done
[ -x "$bin/containerd-shim-runc-v2" ] || cluster_missing+=("$bin/containerd-shim-runc-v2")
for b in runc nft iptables unshare nsenter; do
	command -v "$b" >/dev/null 2>&1 || cluster_missing+=("$b")
done
for p in bridge host-local portmap; do
	[ -x "/usr/lib/cni/$p" ] || cluster_missing+=("/usr/lib/cni/$p")
done
if [ ${#cluster_missing[@]} -gt 0 ]; then
	need cluster "the one-node cluster test lacks ${cluster_missing[*]} (make deps builds and installs them: scripts/cluster-deps.sh)"
fi

if [ ${#missing[@]} -gt 0 ]; then
	list=$(IFS=,; echo "${missing[*]}")
	echo "preflight: this machine cannot run the whole suite. Install what is missing, or skip it on purpose with HOLDFAST_TEST_SKIP=$list" >&2
	exit 1
fi
