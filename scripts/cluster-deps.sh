#!/usr/bin/env bash
# Builds and installs what the one-node cluster test (test/cluster) runs, skipping what is cached:
#   - kubelet, kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy, kubectl (module
#     test/cluster/tools), etcd (test/cluster/tools/etcd) and CoreDNS (test/cluster/tools/coredns) into OUT
#     (default $HOME/.cache/holdfast/cluster/<k8s version>/bin), rebuilt when a go.sum (or the Go version) changes;
#   - the pause binary (gcc -static, from the kubernetes module's build/pause) beside them;
#   - containerd's own containerd-shim-runc-v2 at the main module's containerd version into BIN;
#   - Debian's runc, CNI plugins (/usr/lib/cni), nftables (kube-proxy), iptables (CNI portmap), gcc, iproute2
#     (apt-get).
# Usage: cluster-deps.sh BIN [OUT]
set -euo pipefail
bin=$1
root=$(cd "$(dirname "$0")/.." && pwd)
tools=$root/test/cluster/tools
mkdir -p "$bin"

# Debian packages first: gcc is needed for pause below.
apt=()
command -v runc >/dev/null 2>&1 || apt+=(runc)
[ -x /usr/lib/cni/bridge ] || apt+=(containernetworking-plugins)
command -v nft >/dev/null 2>&1 || apt+=(nftables)
command -v iptables >/dev/null 2>&1 || apt+=(iptables)
command -v conntrack >/dev/null 2>&1 || apt+=(conntrack)
command -v ip >/dev/null 2>&1 || apt+=(iproute2)
command -v gcc >/dev/null 2>&1 || apt+=(gcc)
[ -e /usr/lib/x86_64-linux-gnu/libc.a ] || [ -e /usr/lib/aarch64-linux-gnu/libc.a ] || apt+=(libc6-dev)
if [ ${#apt[@]} -gt 0 ]; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		echo "cluster-deps: apt-get install ${apt[*]}" >&2
		export DEBIAN_FRONTEND=noninteractive
		flock /tmp/holdfast-apt.lock apt-get update -qq
		flock /tmp/holdfast-apt.lock apt-get install -y -qq "${apt[@]}" >/dev/null
	else
		echo "cluster-deps: ${apt[*]} not installed and this user cannot apt-get them; make test's preflight will say what that leaves untested" >&2
	fi
fi

# containerd's shim, same version as the main module's containerd (rebuilt when that changes).
ctrd_version=$(cd "$root" && go list -m -f '{{.Version}}' github.com/containerd/containerd/v2)
ctrd_version=${ctrd_version#v}
if ! "$bin/containerd-shim-runc-v2" -v 2>/dev/null | grep -qx "  Version:  $ctrd_version"; then
	(cd "$root" && CGO_ENABLED=0 go build -trimpath \
		-ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$ctrd_version" \
		-o "$bin/containerd-shim-runc-v2" github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2)
fi

k8s_version=$(cd "$tools" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
out=${2:-$HOME/.cache/holdfast/cluster/$k8s_version/bin}
case $out in
*/"$k8s_version"/bin) ;;
*) echo "cluster-deps: warning: $out does not name Kubernetes $k8s_version (test/cluster/tools/go.mod)" >&2 ;;
esac
stamp=$out/.stamp
# The version the binaries report (kubernetes' own builds stamp it the same way; else v0.0.0-master).
minor=${k8s_version#v1.}
minor=${minor%%.*}
k8s_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	k8s_ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done
want=$( { go version; echo "$k8s_ldflags"; cat "$tools/go.sum" "$tools/etcd/go.sum" "$tools/coredns/go.sum"; } | sha256sum | cut -d' ' -f1)
have=$(cat "$stamp" 2>/dev/null || true)
all=(kubelet kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubectl etcd coredns pause)
complete=true
for b in "${all[@]}"; do [ -x "$out/$b" ] || complete=false; done
if [ "$have" = "$want" ] && $complete; then
	exit 0
fi
rm -f "$stamp"
mkdir -p "$out"

timed() { # timed WHAT CMD...: runs CMD, printing how long it took
	local what=$1 start=$SECONDS
	shift
	"$@"
	echo "cluster-deps: $what built in $((SECONDS - start)) s" >&2
}
build() { # build DIR OUTDIR LDFLAGS PKG...
	local dir=$1 o=$2 ldflags=$3
	shift 3
	(cd "$dir" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$o" "$@")
}
k8s=k8s.io/kubernetes/cmd
# etcd and CoreDNS (modules of their own) beside Kubernetes: their downloads and links overlap its compiling.
(
	timed etcd build "$tools/etcd" "$out/etcd" "-s -w" .
	timed coredns build "$tools/coredns" "$out/coredns" "-s -w" .
) &
others=$!
timed kubelet build "$tools" "$out/kubelet" "$k8s_ldflags" "$k8s/kubelet"
timed "kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy, kubectl" build "$tools" "$out/" "$k8s_ldflags" \
	"$k8s/kube-apiserver" "$k8s/kube-controller-manager" "$k8s/kube-scheduler" "$k8s/kube-proxy" "$k8s/kubectl"
wait "$others"
src=$(cd "$tools" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause/linux/pause.c
timed pause gcc -static -O2 -DVERSION=3.10.2 -o "$out/pause" "$src"
strip "$out/pause" 2>/dev/null || true
echo "$want" >"$stamp"
echo "cluster-deps: cluster tools in $out" >&2
