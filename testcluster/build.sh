#!/usr/bin/env bash
# Builds gpuspawner-cluster (Kubernetes' control plane and kubectl) to the path given, stamped with
# the version of k8s.io/kubernetes that go.mod requires, as Kubernetes' own build stamps its binaries
# (hack/lib/version.sh: the version variables of k8s.io/component-base and k8s.io/client-go).
#   testcluster/build.sh OUT
set -euo pipefail
cd "$(dirname "$0")"
out=${1:?usage: testcluster/build.sh OUT}
GO=${GO:-go}
version=$("$GO" list -m -f '{{.Version}}' k8s.io/kubernetes)   # e.g. v1.37.2
if ! [[ "$version" =~ ^v([0-9]+)\.([0-9]+)\. ]]; then
  echo "build.sh: cannot read the version of k8s.io/kubernetes from go.mod (got: $version)" >&2
  exit 1
fi
major=${BASH_REMATCH[1]} minor=${BASH_REMATCH[2]}
ldflags="-s"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
"$GO" build -trimpath -buildvcs=false -ldflags="$ldflags" -o "$out" ./cmd/gpuspawner-cluster
