"""The node agent: simulated GPU nodes on a real Kubernetes control plane.

It does for each node of a cluster file what a real node gets from outside Kubernetes: its
kubelet (registration, lease, status, pods run as processes), the NVIDIA and AMD device plugins
and GPU Feature Discovery (capacity, allocatable, labels) and NVIDIA's DRA kubelet plugin
(ResourceSlices, devices handed to pods).  One module per job:

* ``client.py``: kubeconfig, requests, paged lists, watches, discovery;
* ``nodes.py``: the Node, Lease, heartbeat and ResourceSlice objects (pure);
* ``register.py``: the cluster file applied to the API server;
* ``heartbeat.py``: every node's lease and status heartbeat, in bulk;
* ``informer.py``: list and watch; ``apistore.py``: the kubelet's store over the API;
* ``pods.py``: pods bound to the nodes, handed to the simulated kubelet;
* ``kubeletapi.py``, ``kubeletsocket.py``: the kubelet API (logs, exec, attach, port-forward): the Go program
  ``gpuspawner-kubelet-api``, and the socket it asks;
* ``agent.py``: ``NodeAgent``; ``__main__.py``: ``python -m testcluster.nodeagent``.
"""

from .agent import NodeAgent

__all__ = ["NodeAgent"]
