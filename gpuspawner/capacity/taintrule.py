"""Which node taints a GPU server may tolerate, which taints pass, whether a pod's tolerations
tolerate a taint, and how many nodes a pod's untolerated taints keep it off.  Pure, stdlib only.

A taint is tolerated when its key matches one of the admin's globs
(``GPUSpawner.gpu_tolerated_taint_keys``) and is not one of Kubernetes' own keys; a node with a
hard taint that is not tolerated takes no server (docs/capacity.md, "Taints").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from fnmatch import fnmatchcase
from typing import Any, NamedTuple

from gpuspawner.capacity.model import Taint

__all__ = ["NEVER_TOLERATED_PREFIXES", "DEFAULT_TOLERATED_TAINT_KEYS", "HARD_EFFECTS", "PASSING_TAINT_KEYS",
           "UNSCHEDULABLE_TAINT", "check_tolerated_keys", "taint_key_allowed", "keeps_pods_off", "refuses_servers",
           "is_passing_taint", "tolerates", "NodeTaints", "node_taints_of", "TaintExclusion", "taint_exclusion", "pod_taint_exclusion"]

# Taint keys owned by Kubernetes itself (node lifecycle controller, kubelet):
# see kubernetes.io "Taints and Tolerations", section "Taint based Evictions".
NEVER_TOLERATED_PREFIXES = ("node.kubernetes.io/", "node.cloudprovider.kubernetes.io/")

#: ``GPUSpawner.gpu_tolerated_taint_keys``' default: the GPU vendors' device-plugin taints, AKS's
#: GPU ``sku`` taint and its spot-node taint (https://learn.microsoft.com/azure/aks/gpu-cluster,
#: https://learn.microsoft.com/azure/aks/spot-node-pool).
DEFAULT_TOLERATED_TAINT_KEYS = ("nvidia.com/gpu", "amd.com/gpu", "sku", "kubernetes.azure.com/scalesetpriority")

#: Effects that keep a pod off a node; PreferNoSchedule only steers.
HARD_EFFECTS = ("NoSchedule", "NoExecute")

#: Taints besides Kubernetes' own ``node.kubernetes.io/*`` that come and go with a node's life
#: cycle: the cluster autoscaler's scale-down marks (``ToBeDeletedByClusterAutoscaler``,
#: ``DeletionCandidateOfClusterAutoscaler``: cluster-autoscaler ``utils/taints/taints.go``) and
#: Karpenter's ``karpenter.sh/disrupted`` and ``karpenter.sh/unregistered``.
PASSING_TAINT_KEYS = frozenset(
    {
        "ToBeDeletedByClusterAutoscaler",
        "DeletionCandidateOfClusterAutoscaler",
        "karpenter.sh/disrupted",
        "karpenter.sh/unregistered",
    }
)

#: What a cordoned node means to kube-scheduler's NodeUnschedulable filter: a pod that does not
#: tolerate this taint is kept off a node with ``spec.unschedulable``
#: (``pkg/scheduler/framework/plugins/nodeunschedulable/node_unschedulable.go``).
UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", None, "NoSchedule")


def is_passing_taint(key: str) -> bool:
    """Whether a taint comes and goes with a node's health or life cycle, so that a node that has
    it now may take a pod later: the node lifecycle controller's and the kubelet's
    (``node.kubernetes.io/not-ready``, ``unreachable``, ``unschedulable``, ``memory-pressure``,
    ``disk-pressure``, ``pid-pressure``, ``network-unavailable``; kubernetes.io "Taints and
    Tolerations", "Taint based Evictions"), the cloud node controller's
    ``node.cloudprovider.kubernetes.io/uninitialized``, and :data:`PASSING_TAINT_KEYS`."""
    return key.startswith(NEVER_TOLERATED_PREFIXES) or key in PASSING_TAINT_KEYS


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


def tolerates(toleration: Mapping[str, Any], taint: Taint) -> bool:
    """Whether a pod's toleration (a core/v1 Toleration dict) tolerates ``taint``, as
    ``Toleration.ToleratesTaint`` decides (k8s.io/api/core/v1/toleration.go): an empty effect
    matches every effect, an empty key every key; ``Exists`` matches every value, ``Equal``
    (or no operator) the same value; any other operator matches nothing (``Lt``/``Gt`` only
    behind the alpha feature gate TaintTolerationComparisonOperators, off by default)."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.effect:
        return False
    key = toleration.get("key") or ""
    if key and key != taint.key:
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    return operator == "Equal" and (toleration.get("value") or "") == (taint.value or "")


def _judged(tolerations: Sequence[Mapping[str, Any]], taint: Taint) -> bool | None:
    """True: tolerated; False: not; None: only a ``Lt``/``Gt`` toleration might tolerate it (a
    cluster may enable the comparison operators' feature gate), so no sure answer."""
    maybe = False
    for tol in tolerations:
        if tolerates(tol, taint):
            return True
        if tol.get("operator") in ("Lt", "Gt") and (tol.get("key") or taint.key) == taint.key and (
                tol.get("effect") or taint.effect) == taint.effect:
            maybe = True
    return None if maybe else False


class NodeTaints(NamedTuple):
    """What kube-scheduler's NodeUnschedulable and TaintToleration filters read of a node: whether it
    is cordoned (``spec.unschedulable``) and its NoSchedule/NoExecute taints, sorted. Nodes alike share
    one record, so a cluster of thousands of nodes has a handful (``capacity.node_taints``)."""

    unschedulable: bool
    taints: tuple[Taint, ...]


def node_taints_of(unschedulable: bool, taints: Iterable[Taint]) -> NodeTaints | None:
    """The :class:`NodeTaints` of a node; None when neither filter can turn a pod away from it
    (schedulable, no NoSchedule or NoExecute taint)."""
    hard = tuple(sorted({t for t in taints if t.effect in HARD_EFFECTS}, key=lambda t: (t.key, t.value or "", t.effect)))
    if not unschedulable and not hard:
        return None
    return NodeTaints(bool(unschedulable), hard)


class TaintExclusion(NamedTuple):
    """How many nodes a pod's untolerated taints keep it off, for kube-scheduler's taint filter
    (after NodeUnschedulable, which reports cordoned nodes as such).

    ``lasting``: nodes with a taint the pod does not tolerate that stays (not
    :func:`is_passing_taint`): only an administrator changes that. ``passing``: the other nodes the
    filter may turn the pod away from: their untolerated taints all pass (a node not ready,
    unreachable, being scaled down), or a toleration whose answer is not sure (``Lt``/``Gt``).
    ``taints``: each lasting untolerated taint with how many nodes carry it, most first."""

    lasting: int
    passing: int
    taints: tuple[tuple[Taint, int], ...] = ()

    def lasting_among(self, count: int) -> int:
        """Of ``count`` nodes that the scheduler says a taint turned the pod away from (its 1.35+
        message names no taint), how many surely stay out: at most ``lasting``, and at least
        the ``passing`` ones may be among them. When the cluster changed between the scheduler's
        word and these counts, the smaller of the two bounds is the safe one."""
        return max(0, min(self.lasting, count - self.passing))


def taint_exclusion(nodes: Iterable[tuple[NodeTaints, int]],
                    tolerations: Sequence[Mapping[str, Any]]) -> TaintExclusion:
    """:class:`TaintExclusion` of a pod with ``tolerations`` (core/v1 Toleration dicts) over
    ``nodes``: each distinct :class:`NodeTaints` with how many nodes have it. The cost grows with
    the distinct taint sets, not with the nodes."""
    tolerations = [t for t in tolerations if isinstance(t, Mapping)]
    lasting = passing = 0
    per_taint: Counter = Counter()
    cordon_ok = _judged(tolerations, UNSCHEDULABLE_TAINT)
    for facts, n in nodes:
        if facts.unschedulable and cordon_ok is False:
            continue  # NodeUnschedulable turns the pod away first: "node(s) were unschedulable"
        untolerated = [(t, _judged(tolerations, t)) for t in facts.taints if t.effect in HARD_EFFECTS]
        untolerated = [(t, sure) for t, sure in untolerated if sure is not True]
        if not untolerated:
            continue
        stays = [t for t, sure in untolerated if sure is False and not is_passing_taint(t.key)]
        if stays and not (facts.unschedulable and cordon_ok is None):  # not sure it reaches the filter
            lasting += n
            for t in stays:
                per_taint[t] += n
        else:
            passing += n
    order = sorted(per_taint.items(), key=lambda kv: (-kv[1], kv[0].key, kv[0].value or "", kv[0].effect))
    return TaintExclusion(lasting, passing, tuple(order))


def pod_taint_exclusion(nodes: Iterable[tuple[NodeTaints, int]], pod: Mapping[str, Any]) -> TaintExclusion:
    """:func:`taint_exclusion` of a core/v1 Pod dict's own ``spec.tolerations`` (none, when malformed)."""
    spec = pod.get("spec")
    tolerations = spec.get("tolerations") if isinstance(spec, Mapping) else None
    return taint_exclusion(nodes, tolerations if isinstance(tolerations, list) else ())
