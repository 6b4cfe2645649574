#!/usr/bin/env bash
# Sets up the environment (scripts/setup.sh) and runs the demo: the test cluster (Kubernetes' control plane,
# simulated GPU nodes) and a real JupyterHub with GPUSpawner. Extra arguments go to `gpuspawner demo`,
# e.g. scripts/demo.sh --port 8001
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/node_modules/.bin:$PWD/.venv/bin:$PATH"
exec .venv/bin/gpuspawner demo "$@"
