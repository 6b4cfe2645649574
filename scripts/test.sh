#!/usr/bin/env bash
# Sets up everything the tests need (scripts/setup.sh) and runs the whole test suite.
# Extra arguments go to pytest, e.g. scripts/test.sh -k capacity -x
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --browser --prometheus
export PATH="$PWD/node_modules/.bin:$PWD/.venv/bin:$PATH"
exec .venv/bin/python -m pytest "$@"
