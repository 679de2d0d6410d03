#!/usr/bin/env bash
# fuzz.sh FUZZTIME [PACKAGE...]: runs every native Go fuzz target (func FuzzX(f *testing.F)) of the packages
# (default: all of ./internal/... and ./cmd/...), one after the other, each for FUZZTIME (a go test -fuzztime
# value: 10m, 30s, 5000x). Targets are listed with `go test -list 'Fuzz.*'` per package. A crash stops the run
# with go test's output; the input that crashed is in that package's testdata/fuzz/<FuzzX>/: commit it with the
# fix. FUZZ_PARALLEL sets the workers (go test -parallel; default: GOMAXPROCS).
set -euo pipefail
fuzztime=${1:?usage: fuzz.sh FUZZTIME [PACKAGE...]}
shift
pkgs=("$@")
if [ ${#pkgs[@]} -eq 0 ]; then
	mapfile -t pkgs < <(go list ./internal/... ./cmd/...)
fi
par=()
if [ -n "${FUZZ_PARALLEL:-}" ]; then par=(-parallel "$FUZZ_PARALLEL"); fi
n=0
for pkg in "${pkgs[@]}"; do
	targets=$(go test -list 'Fuzz.*' "$pkg" | grep '^Fuzz' || true)
	for t in $targets; do
		n=$((n + 1))
		echo "== $pkg $t ($fuzztime)"
		start=$(date +%s)
		go test -run '^$' -fuzz "^${t}\$" -fuzztime "$fuzztime" "${par[@]}" "$pkg"
		echo "== $pkg $t: passed after $(($(date +%s) - start))s"
	done
done
if [ "$n" -eq 0 ]; then
	echo "fuzz.sh: no fuzz targets in ${pkgs[*]}" >&2
	exit 1
fi
echo "fuzz.sh: $n targets, $fuzztime each"
