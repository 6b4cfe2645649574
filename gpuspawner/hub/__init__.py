"""Hub glue: everything that imports JupyterHub, KubeSpawner, traitlets, Jinja2 or prometheus_client.

``spawner.GPUSpawner`` (KubeSpawner's seams), ``settings`` (``GPUSpawnerSettings``: the traits the
spawner and the handler share), ``handlers`` (``GET /hub/api/gpus``), ``errors`` (refusals and
failures worded alike on the page, the REST API and the progress stream), ``metrics``
(Prometheus), ``templates`` (the spawn form, shipped as package data, rendered with autoescaping).
"""
