"""gpuspawner: a JupyterHub KubeSpawner for GPU clusters.

Importing the package is cheap: the pure layers (``gpuspawner.capacity``,
``gpuspawner.cuda``) import neither JupyterHub nor a Kubernetes client, and
``GPUSpawner`` is loaded on first use.
"""

__version__ = "0.1.0"

__all__ = ["GPUSpawner", "__version__"]


def __getattr__(name):
    if name == "GPUSpawner":
        from .spawner import GPUSpawner

        return GPUSpawner
    raise AttributeError(f"module 'gpuspawner' has no attribute {name!r}")
