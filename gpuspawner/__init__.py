"""gpuspawner: a JupyterHub KubeSpawner for GPU clusters.  Design notes: docs/architecture.md."""

__version__ = "0.1.0"

__all__ = ["GPUSpawner", "__version__", "config_snippet"]


def config_snippet():
    """The path of the ``jupyterhub_config.d/gpuspawner.py`` snippet
    (``load_subconfig(str(gpuspawner.config_snippet()))``): pip installs it under
    ``<prefix>/share/gpuspawner/jupyterhub_config.d/``; an editable install finds the checkout's
    (``gpuspawner.shared``)."""
    from gpuspawner.shared import shared_dir

    return shared_dir("jupyterhub_config.d") / "gpuspawner.py"


def __getattr__(name):
    if name == "GPUSpawner":
        from gpuspawner.hub.spawner import GPUSpawner

        return GPUSpawner
    raise AttributeError(f"module 'gpuspawner' has no attribute {name!r}")
