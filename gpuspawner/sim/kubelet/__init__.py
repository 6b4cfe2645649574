"""The simulated kubelet: runs the pods bound to the simulated nodes as local processes.

One module per job:

* ``kubelet.py``: ``Kubelet``, the kubelet of every node (pod and node informers, one worker per
  pod, the streaming subresources the API server reaches it for);
* ``worker.py``: ``PodWorker``, one pod's life (admission, volumes, sandbox, init containers,
  containers, restarts, probes, termination);
* ``status.py``: container state and the pod status and conditions reported from it;
* ``env.py``: the container's environment and the downward API's values;
* ``volumes.py``: volume plugins (emptyDir, configMap, secret, downwardAPI, projected, hostPath,
  persistentVolumeClaim) and the atomic writer;
* ``probes.py``: readiness, liveness and startup probes;
* ``logs.py``: container logs and ``pods/log``'s options;
* ``streams.py``: ``pods/exec`` and ``pods/attach`` over the ``channel.k8s.io`` WebSocket protocols;
* ``runtime.py`` and ``shim.py``: the container runtime (a PID, mount and UTS namespace per
  container where the machine allows it; a subreaper process tree otherwise);
* ``network.py``: pod addresses on loopback; ``standin.py``: HTTP stand-ins instead of processes.

What is modelled and what is not: docs/simulated-cluster.md.
"""

from .env import ConfigError, expand
from .kubelet import Kubelet
from .logs import LogError, LogOptions
from .network import IPAllocator
from .worker import STAND_IN_ANNOTATION, TERMINATION_LOG_ENV, ExecError, PodWorker

__all__ = ["Kubelet", "PodWorker", "IPAllocator", "ConfigError", "expand", "ExecError", "LogError", "LogOptions",
           "STAND_IN_ANNOTATION", "TERMINATION_LOG_ENV"]
