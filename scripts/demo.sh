#!/usr/bin/env bash
# The demo: write a few small example archives with holdfast's own generator,
# run one `holdfast sync` on the embedded containerd, and print the status.
set -euo pipefail
bin=$1 dir=$2
if [ -d "$dir" ]; then
	# A demo left running by an earlier, interrupted run would still hold mounts.
	if grep -q " $dir/" /proc/self/mountinfo 2>/dev/null; then
		echo "demo: $dir still has mounts; unmount them or pick DEMO_DIR=..." >&2
		exit 1
	fi
	rm -rf "$dir"
fi
images=$dir/images
mkdir -p "$images/team-b"
gen() { "$bin/imagegen" "$@"; }
echo "==> writing example archives to $images"
gen -o "$images/busybox-like.tar" -format docker-save -name demo.local/base/busybox:1.36 -layers 2 -layer-size 262144 -seed 1
gen -o "$images/web.tar.zst" -format oci -compress zstd -name demo.local/apps/web:2.0 -name demo.local/apps/web:latest -layers 3 -layer-size 524288 -seed 2
gen -o "$images/team-b/api.tar.gz" -format hybrid -compress gzip -name demo.local/apps/api:0.9 -layers 2 -layer-size 393216 -seed 3
gen -o "$images/team-b/multi.tar.xz" -format oci -compress xz -name demo.local/tools/multi:1 -platforms linux/amd64,linux/arm64 -layers 1 -layer-size 131072 -seed 4
echo "this is not an archive; holdfast skips it" > "$images/README"
ls -lR "$images"

export HOLDFAST_LOG_LEVEL=warn
echo
echo "==> holdfast sync --data-dir $dir"
"$bin/holdfast" sync --data-dir "$dir"
echo
echo "==> holdfast sync again (nothing changed: nothing is read)"
"$bin/holdfast" sync --data-dir "$dir"
echo
echo "==> holdfast status --data-dir $dir"
"$bin/holdfast" status --data-dir "$dir"
