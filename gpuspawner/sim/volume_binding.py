"""The scheduler's volume plugins: VolumeBinding and VolumeZone.  Pure.
Design notes: docs/simulated-cluster.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from . import storage_api
from .plugins import Status

__all__ = ["ERR_BIND_CONFLICT", "ERR_NODE_CONFLICT", "ERR_PV_NOT_EXIST", "ERR_UNBOUND_IMMEDIATE", "ERR_ZONE_CONFLICT",
           "StorageView", "PodVolumes", "claim_names", "prefilter"]

ERR_BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
ERR_NODE_CONFLICT = "node(s) had volume node affinity conflict"
ERR_PV_NOT_EXIST = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
ERR_UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"
ERR_ZONE_CONFLICT = "node(s) had no available volume zone"

_ZONE_LABELS = ("topology.kubernetes.io/zone", "topology.kubernetes.io/region",
                "failure-domain.beta.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/region")
_GA = {"failure-domain.beta.kubernetes.io/zone": "topology.kubernetes.io/zone",
       "failure-domain.beta.kubernetes.io/region": "topology.kubernetes.io/region"}


@dataclass(frozen=True)
class StorageView:
    """What the plugins read, as the scheduler's listers give it."""

    claims: Mapping[str, Mapping[str, Any]]  # the pod's namespace: name -> PersistentVolumeClaim
    volumes: Mapping[str, Mapping[str, Any]]  # name -> PersistentVolume
    classes: Mapping[str, Mapping[str, Any]]  # name -> StorageClass


def claim_names(pod: Mapping[str, Any]) -> list[tuple[str, bool]]:
    """The claims the pod's volumes use: ``(name, ephemeral)`` (``<pod>-<volume>`` for ephemeral ones)."""
    out = []
    pod_name = (pod.get("metadata") or {}).get("name", "")
    for vol in (pod.get("spec") or {}).get("volumes") or []:
        if vol.get("persistentVolumeClaim"):
            out.append((str(vol["persistentVolumeClaim"].get("claimName") or ""), False))
        elif vol.get("ephemeral"):
            out.append((f"{pod_name}-{vol.get('name')}", True))
    return out


def _fully_bound(pvc: Mapping[str, Any]) -> bool:
    """``isPVCFullyBound``: a volume name and the bind-completed annotation."""
    ann = (pvc.get("metadata") or {}).get("annotations") or {}
    return bool((pvc.get("spec") or {}).get("volumeName")) and storage_api.ANN_BIND_COMPLETED in ann


def _delay_binding(pvc: Mapping[str, Any], view: StorageView) -> bool:
    """``IsDelayBindingMode``: the claim's class binds WaitForFirstConsumer (a missing class does not)."""
    cls = view.classes.get(storage_api.claim_class(pvc))
    return bool(cls) and cls.get("volumeBindingMode") == "WaitForFirstConsumer"


def _claim_error(name: str, ephemeral: bool, pvc: Mapping[str, Any] | None) -> str | None:
    """``podHasPVCs``: a missing, lost or deleted claim stops the pod before any node is looked at."""
    if pvc is None:
        if ephemeral:
            return f'waiting for ephemeral volume controller to create the persistentvolumeclaim "{name}"'
        return f'persistentvolumeclaim "{name}" not found'
    if (pvc.get("status") or {}).get("phase") == "Lost":
        return (f'persistentvolumeclaim "{name}" bound to non-existent persistentvolume '
                f'"{(pvc.get("spec") or {}).get("volumeName", "")}"')
    if (pvc.get("metadata") or {}).get("deletionTimestamp"):
        return f'persistentvolumeclaim "{name}" is being deleted'
    return None


@dataclass
class PodVolumes:
    """The pod's claims after PreFilter: bound ones, and WaitForFirstConsumer ones to bind."""

    view: StorageView
    bound: list[Mapping[str, Any]] = field(default_factory=list)
    to_bind: list[Mapping[str, Any]] = field(default_factory=list)
    message: str | None = None  # a PreFilter rejection
    plugin: str = "VolumeBinding"  # whose PreFilter rejected (``plugins.CyclePlugin``)

    def filter(self, node: Mapping[str, Any]) -> Status | None:
        """VolumeBinding then VolumeZone on one node; None when the pod's volumes fit."""
        labels = (node.get("metadata") or {}).get("labels") or {}
        reasons = self._binding_reasons(node, labels)
        if reasons:
            return Status("VolumeBinding", tuple(reasons), True)
        if not self._zones_fit(labels):
            return Status("VolumeZone", (ERR_ZONE_CONFLICT,), True)
        return None

    def _binding_reasons(self, node: Mapping[str, Any], labels: Mapping[str, str]) -> list[str]:
        """``FindPodVolumes``'s reasons, in its order."""
        reasons: list[str] = []
        for pvc in self.bound:
            pv = self.view.volumes.get((pvc.get("spec") or {}).get("volumeName", ""))
            if pv is None:
                reasons.append(ERR_PV_NOT_EXIST)
                break
            if not storage_api.node_affinity_matches(pv, labels):
                reasons.append(ERR_NODE_CONFLICT)
                break
        if self.to_bind and self.decisions(node) is None:
            reasons.append(ERR_BIND_CONFLICT)
        return reasons

    def decisions(self, node: Mapping[str, Any]) -> tuple[list[tuple[Mapping, Mapping]], list[Mapping]] | None:
        """For the chosen node: ``(static bindings (pv, pvc), claims to provision)``, or None when
        a claim can neither bind nor be provisioned there."""
        name = (node.get("metadata") or {}).get("name")
        labels = (node.get("metadata") or {}).get("labels") or {}
        static: list[tuple[Mapping, Mapping]] = []
        provision: list[Mapping] = []
        chosen: set[str] = set()
        for pvc in sorted(self.to_bind, key=storage_api.storage_request):
            selected = ((pvc.get("metadata") or {}).get("annotations") or {}).get(storage_api.ANN_SELECTED_NODE)
            if selected is not None:
                if selected != name:
                    return None
                provision.append(pvc)
                continue
            pv = storage_api.find_matching_volume(pvc, self.view.volumes.values(), labels, True, frozenset(chosen))
            if pv is not None:
                chosen.add(pv["metadata"]["name"])
                static.append((pv, pvc))
            else:
                provision.append(pvc)
        for pvc in provision:
            cls = self.view.classes.get(storage_api.claim_class(pvc))
            if not cls or cls.get("provisioner") in ("", storage_api.NO_PROVISIONER):
                return None
            if not _topology_allows(cls.get("allowedTopologies"), labels):
                return None
        return static, provision

    def _zones_fit(self, labels: Mapping[str, str]) -> bool:
        for pvc in self.bound:
            pv = self.view.volumes.get((pvc.get("spec") or {}).get("volumeName", "")) or {}
            pv_labels = (pv.get("metadata") or {}).get("labels") or {}
            for key in _ZONE_LABELS:
                if key not in pv_labels:
                    continue
                value = labels.get(key, labels.get(_GA.get(key, key)))
                if value is None or value not in set(str(pv_labels[key]).split("__")):
                    return False
        return True


def _topology_allows(terms: Any, labels: Mapping[str, str]) -> bool:
    """``MatchTopologySelectorTerms``: no terms allow every node; terms are ORed."""
    if not terms:
        return True
    for term in terms:
        exprs = term.get("matchLabelExpressions") or []
        if all(labels.get(e.get("key")) in (e.get("values") or []) for e in exprs):
            return True
    return False


def prefilter(pod: Mapping[str, Any], view: StorageView) -> PodVolumes | None:
    """VolumeBinding's (and VolumeZone's) PreFilter; None when the pod uses no claim."""
    names = claim_names(pod)
    if not names:
        return None
    out = PodVolumes(view)
    claims = []
    for name, ephemeral in names:
        pvc = view.claims.get(name)
        error = _claim_error(name, ephemeral, pvc)
        if error:
            out.message = error
            return out
        claims.append(pvc)
    for pvc in claims:
        assert pvc is not None
        if _fully_bound(pvc):
            out.bound.append(pvc)
        elif _delay_binding(pvc, view) and not (pvc.get("spec") or {}).get("volumeName"):
            out.to_bind.append(pvc)
        else:
            out.message = ERR_UNBOUND_IMMEDIATE
            return out
    for pvc in out.bound:
        volume = (pvc.get("spec") or {}).get("volumeName", "")
        if volume not in view.volumes:
            out.message, out.plugin = f'persistentvolume "{volume}" not found', "VolumeZone"
            return out
    return out
