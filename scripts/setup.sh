#!/usr/bin/env bash
# Sets up a development environment from the project's own files:
#   .venv/            Python virtual environment with gpuspawner (editable) and its test dependencies
#   node_modules/     configurable-http-proxy (JupyterHub's proxy), from package-lock.json
#   kubectl           Debian's kubernetes-client, when no kubectl is on PATH (for the kubectl tests and
#                     the demo's hints; needs root or sudo)
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

if ! command -v kubectl >/dev/null 2>&1; then
  echo "==> installing Debian's kubernetes-client (kubectl) for the kubectl tests"
  apt_install kubernetes-client
fi
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
