"""Stopping idle GPU servers: ``gpuspawner cull``.

Pure policy (no JupyterHub, no Kubernetes or HTTP client):

* ``rules``: the timeouts (default, per profile, per pool), maximum age,
  exempt groups, noise floor; read from a YAML/JSON file; worded for users;
* ``activity``: DCGM exporter series -> each pod's GPU activity over a window;
* ``servers``: the hub's user models and the server pods -> ``Server`` records;
* ``policy``: one server's decision (cull, keep, skip) and why;
* ``coverage``: GPU nodes whose activity the culler cannot see (for ``doctor``);
* ``now``: a server's GPU use now and when its rule would stop it (the hub's home page).

I/O: ``prometheus`` (a Prometheus server's HTTP API), ``scrape`` (the DCGM
exporter pods, found through the Kubernetes API), ``hub`` (JupyterHub's REST
API), ``kube`` (Kubernetes credentials, the server pods), ``metrics`` (the
culler's own Prometheus metrics), ``culler`` (one pass: read, decide, stop).
See docs/culling.md.
"""
