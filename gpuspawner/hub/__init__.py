"""Hub glue: everything that imports JupyterHub, KubeSpawner, traitlets, Jinja2 or prometheus_client."""
