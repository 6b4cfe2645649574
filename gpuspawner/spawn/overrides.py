"""The pod overrides that keep a server inside the GPU pool a user chose."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuspawner.capacity.model import Pin, PoolView, Taint
from gpuspawner.spawn.tolerations import taint_key_allowed, toleration_for

HOSTNAME_LABEL = "kubernetes.io/hostname"


class PoolNotPinnable(ValueError):
    """The pool has neither defining labels nor known nodes to pin a pod to."""


@dataclass(frozen=True)
class PodOverrides:
    """New values for KubeSpawner traits (each the whole new value)."""

    extra_resource_limits: dict[str, str]
    extra_resource_guarantees: dict[str, str]
    node_affinity_required: list[dict[str, Any]]
    tolerations: list[dict[str, Any]]

    def as_traits(self) -> dict[str, Any]:
        return {
            "extra_resource_limits": self.extra_resource_limits,
            "extra_resource_guarantees": self.extra_resource_guarantees,
            "node_affinity_required": self.node_affinity_required,
            "tolerations": self.tolerations,
        }


def pool_match_terms(pool: PoolView) -> list[list[dict[str, Any]]]:
    """The alternatives (ORed) of matchExpressions that together hold on every node of
    the pool and on no other node with its GPU resource.

    The capacity layer gives each way the pool's nodes are pinned by labels
    (``PoolView.pins``): the labels they carry as ``In`` (node group, GFD
    product) and those they do not as ``DoesNotExist`` (the node-group labels
    that would have put them in another group, the product label of a pool
    whose nodes publish none), which also hold on nodes that join later. So a
    cluster without GPU Feature Discovery or node groups (every GPU node in one
    pool) is pinned by a few label expressions, not by a list of its node
    names; a pool has more than one alternative only when its nodes are
    labelled differently. A view without pins is pinned by its
    ``defining_labels``, else by hostname to the nodes it has now; a pool with
    neither labels nor nodes cannot be pinned and raises :class:`PoolNotPinnable`.
    A node with a group label set to "" counts as without it for grouping but
    not for ``DoesNotExist``: such a node is left out (a pod is never placed
    outside its pool).
    """
    pins = pool.pins or ((Pin(pool.defining_labels),) if pool.defining_labels else ())
    if pins:
        return [
            [{"key": key, "operator": "In", "values": [value]} for key, value in sorted(pin.present)]
            + [{"key": key, "operator": "DoesNotExist"} for key in sorted(pin.absent)]
            for pin in pins
        ]
    names = sorted({n.name for n in pool.node_views})
    if names:
        return [[{"key": HOSTNAME_LABEL, "operator": "In", "values": names}]]
    raise PoolNotPinnable(
        f"GPU pool {pool.id} has no node labels that define it and no known nodes, "
        "so a server cannot be kept inside it"
    )


def pool_pinnable(pool: PoolView) -> bool:
    return pool.pinnable


def _merge_affinity(
    existing: Sequence[dict[str, Any]], alternatives: list[list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    """Each of the admin's terms ANDed with each alternative (terms are ORed, the
    expressions in a term ANDed): one term per pair."""
    merged = []
    for term in existing or [{}]:
        term = dict(term)
        # KubeSpawner passes terms through get_k8s_model, which accepts both
        # the camelCase wire names and the snake_case model names
        key = "match_expressions" if "match_expressions" in term else "matchExpressions"
        own = [dict(e) for e in term.get(key) or []]
        for expressions in alternatives:
            merged.append({**term, key: own + [dict(e) for e in expressions if e not in own]})
    return merged


def _tol_key(tol: Mapping[str, Any]) -> tuple:
    return (
        tol.get("key"),
        tol.get("operator", "Equal"),
        tol.get("value"),
        tol.get("effect"),
    )


def pool_tolerations(
    taints: Iterable[Taint],
    allowed_taint_keys: Iterable[str],
    tolerations: Sequence[Mapping[str, Any]] = (),
) -> list[dict[str, Any]]:
    """The tolerations a server in a pool with ``taints`` gets: the admin's own
    (``tolerations``), then the narrowest toleration of each taint whose key the admin allows
    (``taints.taint_key_allowed``), each once.  ``doctor`` asks the same question of a node's
    taints."""
    allowed = tuple(allowed_taint_keys)
    tols = [dict(t) for t in tolerations]
    seen = {_tol_key(t) for t in tols}
    for taint in sorted(taints, key=lambda t: (t.key, t.value or "", t.effect)):
        if not taint_key_allowed(taint.key, allowed):
            continue
        tol = toleration_for(taint)
        if _tol_key(tol) not in seen:
            seen.add(_tol_key(tol))
            tols.append(tol)
    return tols


def build_overrides(
    pool: PoolView,
    gpus: int,
    *,
    allowed_taint_keys: Iterable[str],
    limits: dict[str, Any] | None = None,
    guarantees: dict[str, Any] | None = None,
    affinity_required: Sequence[dict[str, Any]] = (),
    tolerations: Sequence[dict[str, Any]] = (),
    is_gpu_resource: Callable[[str], bool] | None = None,
    extra_expressions: Sequence[dict[str, Any]] = (),
) -> PodOverrides:
    """Overrides for ``gpus`` GPUs of ``pool``, on top of the current values.

    ``extra_expressions`` are ANDed with the pool's own in every term: the
    CUDA check's driver-label ``NotIn`` expressions that keep the pod off
    the pool's nodes whose driver does not fit the image
    (:func:`gpuspawner.spawn.cuda_fit.steering_expressions`).

    ``is_gpu_resource`` (optional) names the other GPU resources: an admin's
    static limit on one (say ``nvidia.com/gpu: 1`` in a shared
    ``kubespawner_override``) is dropped, since a pod asking for two kinds of
    GPU fits no node of this pool.
    """
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise ValueError(f"a GPU count must be a positive integer, not {gpus!r}")

    def _without_other_gpus(d: dict[str, Any] | None) -> dict[str, str]:
        out = {}
        for k, v in (d or {}).items():
            if k != pool.resource and is_gpu_resource and is_gpu_resource(k):
                continue
            out[k] = str(v)
        return out

    new_limits = _without_other_gpus(limits)
    new_guarantees = _without_other_gpus(guarantees)
    if pool.dra is None:
        new_limits[pool.resource] = str(gpus)
        new_guarantees[pool.resource] = str(gpus)
    # a DRA pool's GPUs come through a ResourceClaim (gpuspawner.spawn.dra_claim), not an extended resource

    extra = [dict(e) for e in extra_expressions]
    affinity = _merge_affinity(affinity_required, [terms + extra for terms in pool_match_terms(pool)])

    return PodOverrides(
        extra_resource_limits=new_limits,
        extra_resource_guarantees=new_guarantees,
        node_affinity_required=affinity,
        tolerations=pool_tolerations(pool.taints, allowed_taint_keys, tolerations),
    )
