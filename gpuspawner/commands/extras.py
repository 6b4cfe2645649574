"""The optional dependencies a command needs, and the message when they are missing.
Design notes: docs/architecture.md.
"""

from __future__ import annotations

import importlib.util

__all__ = ["DEMO_MODULES", "missing", "demo_extra_problem"]

#: import name -> distribution, for each requirement of the ``demo`` extra: the test cluster's
#: kubelet starts jupyterhub-singleuser and its kernels, and the demo's servers open JupyterLab
DEMO_MODULES = {"jupyter_server": "jupyter_server", "ipykernel": "ipykernel", "jupyterlab": "jupyterlab"}


def missing(modules: dict[str, str]) -> list[str]:
    """The distributions of ``modules`` (import name -> distribution) that cannot be imported."""
    return [dist for name, dist in modules.items() if importlib.util.find_spec(name) is None]


def demo_extra_problem(command: str) -> str | None:
    """None when the ``demo`` extra is installed, else the one line that says what to install."""
    absent = missing(DEMO_MODULES)
    if not absent:
        return None
    return (
        f"gpuspawner {command} needs the test cluster's dependencies, which a hub does not install "
        f"(missing: {', '.join(absent)}); install them with: pip install 'gpuspawner[demo]'"
    )
