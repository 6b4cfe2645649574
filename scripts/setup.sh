#!/usr/bin/env bash
# Sets up a development environment from the project's own files:
#   .venv/            Python virtual environment with gpuspawner (editable) and its test dependencies
#   node_modules/     configurable-http-proxy (JupyterHub's proxy), from package-lock.json
#   .venv/bin/gpuspawner-cluster  the test cluster's program (testcluster/): Kubernetes v1.37.2's
#                     control plane and kubectl, built with Go >= 1.26 into a cache keyed by the hash of
#                     testcluster/go.sum and its Go sources; .venv/bin/kubectl is a link to it
#   .venv/bin/gpuspawner-kubelet-api  the simulated nodes' kubelet API (testcluster/kubelet), built by
#                     scripts/kubelet-build.sh into a cache keyed by that module's go.sum and sources
#   Kueue             its controller manager (testcluster/kueue), built by scripts/kueue-build.sh into a cache
#                     keyed by that module's go.sum
#   /usr/bin/chromium Debian's Chromium for the browser tests (only with --browser; needs root or sudo)
#   initdb/pg_ctl     Debian's PostgreSQL for the GPU-hour ledger's tests on PostgreSQL (needs root or
#                     sudo; its system service is left stopped: the tests start a throwaway cluster)
#   /usr/bin/prometheus Debian's Prometheus for the culler's end-to-end tests (only with --prometheus;
#                     needs root or sudo; its system service is left stopped: the tests start their own)
# Safe to run again: each step is skipped when already done.
set -euo pipefail
cd "$(dirname "$0")/.."

want_browser=0
want_prometheus=0
for arg in "$@"; do
  case "$arg" in
    --browser) want_browser=1 ;;
    --prometheus) want_prometheus=1 ;;
    *) echo "setup.sh: unknown option $arg (known: --browser, --prometheus)" >&2; exit 2 ;;
  esac
done

PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
  echo "setup.sh: gpuspawner needs Python >= 3.10 (found: $("$PYTHON" --version 2>&1))" >&2
  exit 1
fi
if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv"
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.gpuspawner-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "==> installing gpuspawner and its test dependencies into .venv"
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e '.[test]'
  touch "$stamp"
fi

if ! command -v npm >/dev/null 2>&1; then
  echo "setup.sh: npm is needed for configurable-http-proxy (JupyterHub's proxy); install Node.js >= 18" >&2
  exit 1
fi
if [ ! -x node_modules/.bin/configurable-http-proxy ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "==> installing configurable-http-proxy into node_modules"
  npm ci --no-audit --no-fund --loglevel=error
fi

SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
apt_updated=0
apt_install() {
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup.sh: $1 is missing and this is not a Debian-based system: install $1 yourself" >&2
    exit 1
  fi
  if [ "$apt_updated" = 0 ]; then
    $SUDO apt-get update -qq
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$1" >/dev/null
}

# The test cluster: one Go program holding Kubernetes' own control plane and kubectl (docs/test-cluster.md).
GO=${GO:-go}
if ! command -v "$GO" >/dev/null 2>&1; then
  echo "setup.sh: Go >= 1.26 is needed to build the test cluster (testcluster/): install it from https://go.dev/dl/" >&2
  exit 1
fi
go_version=$("$GO" env GOVERSION 2>/dev/null || true)
if ! [[ "$go_version" =~ ^go([0-9]+)\.([0-9]+) ]] \
    || [ "${BASH_REMATCH[1]}" -lt 1 ] || { [ "${BASH_REMATCH[1]}" = 1 ] && [ "${BASH_REMATCH[2]}" -lt 26 ]; }; then
  echo "setup.sh: Go >= 1.26 is needed to build the test cluster (testcluster/), found: ${go_version:-an unknown version} ($(command -v "$GO"))" >&2
  exit 1
fi
cluster_hash=$(
  cd testcluster
  { echo "$go_version"; find . -name '*.go' ! -name '*_test.go' -print | LC_ALL=C sort | xargs sha256sum
    sha256sum go.mod go.sum build.sh; } \
    | sha256sum | cut -c1-16
)
cluster_dir="${XDG_CACHE_HOME:-$HOME/.cache}/gpuspawner/cluster/$cluster_hash"
cluster_bin="$cluster_dir/gpuspawner-cluster"
if [ -x "$cluster_bin" ]; then
  echo "==> gpuspawner-cluster (Kubernetes v1.37.2 control plane and kubectl) is built: $cluster_bin"
else
  echo "==> building gpuspawner-cluster (Kubernetes v1.37.2 control plane and kubectl) with $go_version into $cluster_dir"
  echo "    (the first build compiles Kubernetes: about 13 CPU-minutes, 7 to 35 minutes on 2 shared cores; later builds reuse Go's cache)"
  mkdir -p "$cluster_dir"
  echo "    $ GO=$GO testcluster/build.sh $cluster_bin"
  GO="$GO" testcluster/build.sh "$cluster_bin.tmp"
  mv "$cluster_bin.tmp" "$cluster_bin"
fi
ln -sfn "$cluster_bin" .venv/bin/gpuspawner-cluster
ln -sfn gpuspawner-cluster .venv/bin/kubectl
# Kueue's controller manager, from its own module (testcluster/kueue/go.mod), for the queueing tests
echo "==> Kueue's controller manager (testcluster/kueue, cached by its go.sum; the first build takes minutes)"
echo "    $ scripts/kueue-build.sh"
kueue_bin=$(bash scripts/kueue-build.sh)
echo "    $kueue_bin"
# the simulated nodes' kubelet API (logs, exec, attach, port-forward), Kubernetes' streaming server
echo "==> gpuspawner-kubelet-api (testcluster/kubelet, cached by its go.sum and sources)"
echo "    $ scripts/kubelet-build.sh"
kubelet_bin=$(bash scripts/kubelet-build.sh)
ln -sfn "$kubelet_bin" .venv/bin/gpuspawner-kubelet-api
echo "    $kubelet_bin"
if [ "$want_browser" = 1 ] && ! command -v chromium >/dev/null 2>&1; then
  echo "==> installing Debian's chromium for the browser tests"
  apt_install chromium
fi
if [ "$want_prometheus" = 1 ] && ! command -v prometheus >/dev/null 2>&1; then
  echo "==> installing Debian's prometheus for the culler's end-to-end tests"
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  # the package enables a system service on :9090; the tests run their own Prometheus
  if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    $SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true
  fi
fi
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  echo "==> installing Debian's postgresql for the GPU-hour ledger's tests on PostgreSQL"
  apt_install postgresql
  # the package may start a cluster as a system service; the tests run their own
  if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    $SUDO systemctl disable --now postgresql >/dev/null 2>&1 || true
  fi
fi
echo "==> environment ready"
