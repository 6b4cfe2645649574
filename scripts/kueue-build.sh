#!/usr/bin/env bash
# Builds Kueue's controller manager (sigs.k8s.io/kueue/cmd/kueue, at the version pinned in
# testcluster/kueue/go.mod) into a cache keyed by that module's go.mod and go.sum and this recipe, and
# prints the binary's path. Next to it go Kueue's CRDs (crd/) and webhook manifests (webhook/) from
# the same module, which testcluster/kueue.py applies. A second run with the same inputs only prints
# the path.
#   GPUSPAWNER_CACHE   cache root (default: ${XDG_CACHE_HOME:-~/.cache}/gpuspawner)
#   KUEUE_BUILD_NICE   niceness of the compile (default 10: other builds share the cores)
set -euo pipefail
cd "$(dirname "$0")/../testcluster/kueue"

if ! command -v go >/dev/null 2>&1; then
  echo "kueue-build.sh: Go is needed to build Kueue (go.mod asks for $(sed -n 's/^go //p' go.mod) or newer)" >&2
  exit 1
fi
# Kueue reads its visibility server's certificate from the fixed directory /visibility when its
# internal cert management is off (pkg/visibility/server.go, certDir); testcluster/kueue.py gives it a
# certificate under /etc/kueue in a private mount namespace, so the link points that variable there.
# Its version is stamped as Kueue's own Makefile does (pkg/version.GitVersion).
version=$(go list -mod=readonly -m -f '{{.Version}}' sigs.k8s.io/kueue)
ldflags="-s -w -X sigs.k8s.io/kueue/pkg/visibility.certDir=/etc/kueue/visibility -X sigs.k8s.io/kueue/pkg/version.GitVersion=$version"
cache_root=${GPUSPAWNER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuspawner}
key=$( (cat go.mod go.sum; echo "$ldflags") | sha256sum | cut -c1-16)
dir="$cache_root/kueue/$key"
out="$dir/kueue"
if [ -x "$out" ] && [ -d "$dir/crd" ] && [ -f "$dir/webhook/manifests.yaml" ]; then
  echo "$out"
  exit 0
fi
mkdir -p "$dir"
tmp="$out.tmp.$$"
trap 'rm -f "$tmp"' EXIT
start=$(date +%s)
# -mod=readonly: go.mod and go.sum as committed are the whole input; -s -w: no symbol tables
nice -n "${KUEUE_BUILD_NICE:-10}" go build -mod=readonly -trimpath -ldflags="$ldflags" -o "$tmp" sigs.k8s.io/kueue/cmd/kueue
src=$(go list -mod=readonly -m -f '{{.Dir}}' sigs.k8s.io/kueue)
rm -rf "$dir/crd" "$dir/webhook"
mkdir -p "$dir/crd" "$dir/webhook"
cp "$src"/config/components/crd/bases/*.yaml "$dir/crd/"
cp "$src/config/components/webhook/manifests.yaml" "$dir/webhook/"
chmod -R u+w "$dir/crd" "$dir/webhook"
mv "$tmp" "$out"
echo "kueue-build.sh: built sigs.k8s.io/kueue $version in $(( $(date +%s) - start )) s" >&2
echo "$out"
