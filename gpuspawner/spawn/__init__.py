"""The rules for one spawn: pure functions over capacity snapshots and user options.

Profiles and offers (``profiles``), the one validation path for the form and the REST API
(``options``), the pod overrides for a pool (``overrides``), group access and GPU quotas
(``access``, ``quota``), the taint policy (``taints``), a pool's CUDA fit for an image
(``cuda_fit``) and the on-node probe container (``probe``), the grammar of the scheduler's,
autoscalers' and kubelet's messages (``scheduler_messages``), the GPU-words progress (``progress``)
and the verdict on a Pending pod (``pending``).

Nothing here imports JupyterHub, KubeSpawner, traitlets, Jinja2, prometheus_client or a
Kubernetes client.
"""
