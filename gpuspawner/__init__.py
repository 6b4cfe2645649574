"""gpuspawner: a JupyterHub KubeSpawner for GPU clusters.  Design notes: docs/architecture.md."""

__version__ = "0.1.0"

__all__ = ["GPUSpawner", "__version__", "config_snippet"]


def config_snippet():
    """The path of the ``jupyterhub_config.d/gpuspawner.py`` snippet shipped in the package
    (``load_subconfig(str(gpuspawner.config_snippet()))``); pip also installs a copy under
    ``<prefix>/share/gpuspawner/jupyterhub_config.d/``."""
    from importlib.resources import files

    return files("gpuspawner") / "data" / "jupyterhub_config.d" / "gpuspawner.py"


def __getattr__(name):
    if name == "GPUSpawner":
        from gpuspawner.hub.spawner import GPUSpawner

        return GPUSpawner
    raise AttributeError(f"module 'gpuspawner' has no attribute {name!r}")
