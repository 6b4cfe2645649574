"""The cluster under ``gpuspawner demo`` and ``gpuspawner sim``: the test cluster of a source checkout
(``testcluster/``: Kubernetes' own control plane and the node agent), imported only when a command runs."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from types import ModuleType

CHECKOUT = Path(__file__).resolve().parents[2]
BINARIES = ("gpuspawner-cluster", "gpuspawner-kubelet-api")
SETUP_HINT = "run scripts/setup.sh in the gpuspawner checkout (it builds them with Go >= 1.26 into .venv/bin)"


def _bin_dirs() -> list[str]:
    return [str(Path(sys.executable).parent), *os.environ.get("PATH", "").split(os.pathsep)]


def problem(command: str) -> str | None:
    """None when the test cluster can run here, else the one line that says what to do."""
    if not (CHECKOUT / "testcluster" / "stack.py").is_file():
        return (f"gpuspawner {command} runs Kubernetes' own control plane from a source checkout's testcluster/, "
                f"which this installation ({CHECKOUT}) does not have: clone the gpuspawner repository and "
                "run scripts/setup.sh there")
    path = os.pathsep.join(_bin_dirs())
    absent = [b for b in BINARIES if not shutil.which(b, path=path)
              and not (b == "gpuspawner-cluster" and os.environ.get("GPUSPAWNER_CLUSTER_BIN"))]
    if absent:
        return f"gpuspawner {command}: {' and '.join(absent)} not found: {SETUP_HINT}"
    return None


def default_cluster_file() -> Path:
    """The packaged demo cluster (gpuspawner/data/clusters/default.yaml)."""
    return Path(__file__).resolve().parents[1] / "data" / "clusters" / "default.yaml"


def load() -> ModuleType:
    """``testcluster.stack``, with the checkout importable and the interpreter's bin folder on PATH
    (where setup links the cluster's binaries)."""
    os.environ["PATH"] = os.pathsep.join(dict.fromkeys(_bin_dirs()))
    if str(CHECKOUT) not in sys.path:
        sys.path.insert(0, str(CHECKOUT))
    import testcluster.stack

    return testcluster.stack


def load_kueue() -> ModuleType:
    """``testcluster.kueue`` (Kueue's launcher), after :func:`load`."""
    load()
    import testcluster.kueue

    return testcluster.kueue
