"""The taint policy: which node taints a GPU server may tolerate.  Pure, stdlib only.

One rule, used by the overrides (the tolerations a server gets), the progress messages
(why a pod waits) and ``doctor`` (taints no profile tolerates): a taint is tolerated when
its key matches one of the admin's globs (``GPUSpawner.gpu_tolerated_taint_keys``) and is
not one of Kubernetes' own keys.
"""

from __future__ import annotations

from collections.abc import Iterable
from fnmatch import fnmatchcase
from typing import Any

from gpuspawner.capacity.model import PoolView, Taint

__all__ = ["NEVER_TOLERATED_PREFIXES", "DEFAULT_TOLERATED_TAINT_KEYS", "HARD_EFFECTS", "taint_key_allowed",
           "toleration_for", "untolerated_taints"]

# Taint keys owned by Kubernetes itself (node lifecycle controller, kubelet):
# see kubernetes.io "Taints and Tolerations", section "Taint based Evictions".
NEVER_TOLERATED_PREFIXES = ("node.kubernetes.io/", "node.cloudprovider.kubernetes.io/")

#: ``GPUSpawner.gpu_tolerated_taint_keys``' default: the GPU vendors' device-plugin taints, AKS's
#: GPU ``sku`` taint and its spot-node taint (shared/reference/cuda-compat-and-gpu-labels.md).
DEFAULT_TOLERATED_TAINT_KEYS = ("nvidia.com/gpu", "amd.com/gpu", "sku", "kubernetes.azure.com/scalesetpriority")

#: Effects that keep a pod off a node; PreferNoSchedule only steers.
HARD_EFFECTS = ("NoSchedule", "NoExecute")


def taint_key_allowed(key: str, allowed: Iterable[str]) -> bool:
    """Whether a taint key may be tolerated: it matches one of the admin's
    globs and is not one of Kubernetes' own ``node.kubernetes.io/*`` keys."""
    if not key or key.startswith(NEVER_TOLERATED_PREFIXES):
        return False
    return any(fnmatchcase(key, pattern) for pattern in allowed)


def toleration_for(taint: Taint) -> dict[str, Any]:
    """The narrowest toleration of one taint: ``Equal`` on its value, or
    ``Exists`` with its key when the taint has no value."""
    tol: dict[str, Any] = {"key": taint.key, "effect": taint.effect}
    if taint.value:
        tol["operator"] = "Equal"
        tol["value"] = taint.value
    else:
        tol["operator"] = "Exists"
    return tol


def untolerated_taints(pool: PoolView, allowed_taint_keys: Iterable[str]) -> tuple[Taint, ...]:
    """Hard taints of the pool (other than Kubernetes' own node-condition
    taints) that the pod will not tolerate, so the scheduler keeps it off
    those nodes: logged for the admin, who may allow the key."""
    allowed = tuple(allowed_taint_keys)
    return tuple(
        t
        for t in pool.taints
        if t.effect in HARD_EFFECTS
        and not t.key.startswith(NEVER_TOLERATED_PREFIXES)
        and not taint_key_allowed(t.key, allowed)
    )
