#!/usr/bin/env bash
# Builds gpuspawner-kubelet-api (testcluster/kubelet: the kubelet API of the node agent's simulated
# nodes, on Kubernetes' streaming server k8s.io/cri-streaming) into a cache keyed by that module's
# go.mod, go.sum and Go sources and this recipe, and prints the binary's path. A second run with the
# same inputs only prints the path.
#   GPUSPAWNER_CACHE     cache root (default: ${XDG_CACHE_HOME:-~/.cache}/gpuspawner)
#   KUBELET_BUILD_NICE   niceness of the compile (default 10: other builds share the cores)
set -euo pipefail
cd "$(dirname "$0")/../testcluster/kubelet"

if ! command -v go >/dev/null 2>&1; then
  echo "kubelet-build.sh: Go is needed to build gpuspawner-kubelet-api (go.mod asks for $(sed -n 's/^go //p' go.mod) or newer)" >&2
  exit 1
fi
ldflags="-s -w"
cache_root=${GPUSPAWNER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuspawner}
key=$( (cat go.mod go.sum; find . -name '*.go' ! -name '*_test.go' -print0 | LC_ALL=C sort -z | xargs -0 cat;
        echo "$ldflags") | sha256sum | cut -c1-16)
dir="$cache_root/kubelet/$key"
out="$dir/gpuspawner-kubelet-api"
if [ -x "$out" ]; then
  echo "$out"
  exit 0
fi
mkdir -p "$dir"
tmp="$out.tmp.$$"
trap 'rm -f "$tmp"' EXIT
start=$(date +%s)
# -mod=readonly: go.mod and go.sum as committed are the whole input; -s -w: no symbol tables
nice -n "${KUBELET_BUILD_NICE:-10}" go build -mod=readonly -trimpath -buildvcs=false -ldflags="$ldflags" \
  -o "$tmp" ./cmd/gpuspawner-kubelet-api
mv "$tmp" "$out"
echo "kubelet-build.sh: built gpuspawner-kubelet-api in $(( $(date +%s) - start )) s" >&2
echo "$out"
