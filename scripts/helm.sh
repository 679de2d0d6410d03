#!/usr/bin/env bash
# Builds helm v4 into $HOME/.cache/holdfast/helm/<version> (once) and links BIN/helm to it.
# The chart tests (test/chart) and the cluster test use BIN/helm.
set -euo pipefail
bin=$1 version=${2:-v4.3.2}
cache="${HOME}/.cache/holdfast/helm/${version}"
mkdir -p "$bin" "$cache"
if [ ! -x "$cache/helm" ]; then
	GOBIN="$cache" go install "helm.sh/helm/v4/cmd/helm@${version}"
fi
ln -sfn "$cache/helm" "$bin/helm"
