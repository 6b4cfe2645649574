"""Which node taints a GPU server may tolerate, and so which nodes can take it.  Pure, stdlib only.

A taint is tolerated when its key matches one of the admin's globs
(``GPUSpawner.gpu_tolerated_taint_keys``) and is not one of Kubernetes' own keys; a node with a
hard taint that is not tolerated takes no server (docs/capacity.md, "Taints").
"""

from __future__ import annotations

from collections.abc import Iterable
from fnmatch import fnmatchcase
from typing import Any

from gpuspawner.capacity.model import Taint

__all__ = ["NEVER_TOLERATED_PREFIXES", "DEFAULT_TOLERATED_TAINT_KEYS", "HARD_EFFECTS", "check_tolerated_keys",
           "taint_key_allowed", "keeps_pods_off", "refuses_servers"]

# Taint keys owned by Kubernetes itself (node lifecycle controller, kubelet):
# see kubernetes.io "Taints and Tolerations", section "Taint based Evictions".
NEVER_TOLERATED_PREFIXES = ("node.kubernetes.io/", "node.cloudprovider.kubernetes.io/")

#: ``GPUSpawner.gpu_tolerated_taint_keys``' default: the GPU vendors' device-plugin taints, AKS's
#: GPU ``sku`` taint and its spot-node taint (https://learn.microsoft.com/azure/aks/gpu-cluster,
#: https://learn.microsoft.com/azure/aks/spot-node-pool).
DEFAULT_TOLERATED_TAINT_KEYS = ("nvidia.com/gpu", "amd.com/gpu", "sku", "kubernetes.azure.com/scalesetpriority")

#: Effects that keep a pod off a node; PreferNoSchedule only steers.
HARD_EFFECTS = ("NoSchedule", "NoExecute")


def taint_key_allowed(key: str, allowed: Iterable[str]) -> bool:
    """Whether a taint key may be tolerated: it matches one of the admin's
    globs and is not one of Kubernetes' own ``node.kubernetes.io/*`` keys."""
    if not key or key.startswith(NEVER_TOLERATED_PREFIXES):
        return False
    return any(fnmatchcase(key, pattern) for pattern in allowed)


# keys no admin means to tolerate: a glob matching them matches any key (``*``, ``*/*``, ``?*``)
_UNRELATED_KEYS = ("zz-unrelated.example/zz-any-taint-key", "zz-any-taint-key")


def check_tolerated_keys(patterns: Any) -> tuple[str, ...]:
    """The admin's tolerated taint keys, checked: a list of keys or globs that are not empty, not
    Kubernetes' own (``node.kubernetes.io/*``) and not catch-alls; else ValueError saying what to write."""
    if isinstance(patterns, str) or not isinstance(patterns, (list, tuple)):
        raise ValueError(f"expected a list of taint keys or globs such as ['nvidia.com/gpu'], not {patterns!r}")
    for key in patterns:
        if not isinstance(key, str) or not key.strip():
            raise ValueError(f"{key!r} is not a taint key: an empty key would tolerate every taint; "
                             "write e.g. 'nvidia.com/gpu'")
        if key.startswith(NEVER_TOLERATED_PREFIXES):
            raise ValueError(f"{key!r} may not be tolerated: node.kubernetes.io/* taints mark unhealthy or "
                             "cordoned nodes")
        if any(fnmatchcase(probe, key) for probe in _UNRELATED_KEYS):
            raise ValueError(f"{key!r} would tolerate any taint (a wildcard is refused): name the GPU taints' "
                             "keys, e.g. 'nvidia.com/gpu' or 'example.com/*'")
    return tuple(patterns)


def keeps_pods_off(taint: Taint) -> bool:
    """Whether a taint keeps untolerating pods off its node for good: a hard effect, and not one
    of Kubernetes' own node-condition keys (those come and go with the node's health)."""
    return taint.effect in HARD_EFFECTS and not taint.key.startswith(NEVER_TOLERATED_PREFIXES)


def refuses_servers(taints: Iterable[Taint], allowed: Iterable[str]) -> bool:
    """Whether a node with ``taints`` keeps every GPU server off: one of them is hard and its key is
    not one a server tolerates (kube-scheduler's TaintToleration filter then rejects the node)."""
    allowed = tuple(allowed)
    return any(keeps_pods_off(t) and not taint_key_allowed(t.key, allowed) for t in taints)
