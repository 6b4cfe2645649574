"""Shared test setup.

The end-to-end tests run JupyterHub with a real configurable-http-proxy; make the copy that
scripts/setup.sh installs (node_modules/.bin) findable when pytest is started by hand.
"""

import os
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
_node_bin = ROOT / "node_modules" / ".bin"
if _node_bin.is_dir() and str(_node_bin) not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = f"{_node_bin}{os.pathsep}{os.environ.get('PATH', '')}"
