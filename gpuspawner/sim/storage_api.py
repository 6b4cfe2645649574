"""Storage API rules: StorageClass, PersistentVolume and PersistentVolumeClaim as the API server keeps them.
Design notes: docs/simulated-apiserver.md.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Iterable, Mapping

from .plugins import term_matches
from testcluster.node.pod_resources import QuantityError, parse_quantity
from .selectors import validate_qualified_name
from .validation import Cause, invalid, not_supported, required

__all__ = ["ACCESS_MODES", "ANN_SELECTED_NODE", "ANN_BIND_COMPLETED", "ANN_BOUND_BY_CONTROLLER",
           "ANN_STORAGE_PROVISIONER", "ANN_BETA_STORAGE_PROVISIONER", "ANN_PROVISIONED_BY", "ANN_DEFAULT_CLASS",
           "PVC_PROTECTION", "PV_PROTECTION", "NO_PROVISIONER", "is_default_class", "find_matching_volume",
           "is_volume_bound_to_claim", "label_selector_matches", "storage_request", "default_class", "claim_class",
           "volume_class",
           "access_modes_string", "node_affinity_matches", "default_storage_object", "validate_storage_object",
           "admit"]

ANN_DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"
ANN_BETA_DEFAULT_CLASS = "storageclass.beta.kubernetes.io/is-default-class"
ANN_BETA_STORAGE_CLASS = "volume.beta.kubernetes.io/storage-class"
ANN_SELECTED_NODE = "volume.kubernetes.io/selected-node"
ANN_STORAGE_PROVISIONER = "volume.kubernetes.io/storage-provisioner"
ANN_BETA_STORAGE_PROVISIONER = "volume.beta.kubernetes.io/storage-provisioner"
ANN_BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
ANN_BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
ANN_PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
PVC_PROTECTION = "kubernetes.io/pvc-protection"
PV_PROTECTION = "kubernetes.io/pv-protection"
NO_PROVISIONER = "kubernetes.io/no-provisioner"  # volume.NotSupportedProvisioner

ACCESS_MODES = ("ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod")
_SHORT_MODES = {"ReadWriteOnce": "RWO", "ReadOnlyMany": "ROX", "ReadWriteMany": "RWX", "ReadWriteOncePod": "RWOP"}
_VOLUME_MODES = ("Block", "Filesystem")
# the PersistentVolumeSource members (core/v1 types.go); one must be set
_VOLUME_SOURCES = ("gcePersistentDisk", "awsElasticBlockStore", "hostPath", "glusterfs", "nfs", "rbd", "iscsi",
                   "cinder", "cephfs", "fc", "flocker", "flexVolume", "azureFile", "vsphereVolume", "quobyte",
                   "azureDisk", "photonPersistentDisk", "portworxVolume", "scaleIO", "local", "storageos", "csi")


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def is_default_class(sc: Mapping[str, Any]) -> bool:
    """``IsDefaultAnnotation``: the GA or the beta annotation is ``"true"``."""
    ann = _meta(sc).get("annotations") or {}
    return ann.get(ANN_DEFAULT_CLASS) == "true" or ann.get(ANN_BETA_DEFAULT_CLASS) == "true"


def default_class(classes: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """``GetDefaultClass``: the newest default class, then the first by name."""
    marked = [sc for sc in classes if is_default_class(sc)]
    if not marked:
        return None
    by_name = sorted(marked, key=lambda sc: _meta(sc).get("name", ""))
    return max(by_name, key=lambda sc: _meta(sc).get("creationTimestamp") or "")


def claim_class(pvc: Mapping[str, Any]) -> str:
    """``GetPersistentVolumeClaimClass``: the beta annotation, else ``spec.storageClassName``."""
    ann = _meta(pvc).get("annotations") or {}
    if ANN_BETA_STORAGE_CLASS in ann:
        return str(ann[ANN_BETA_STORAGE_CLASS])
    return str((pvc.get("spec") or {}).get("storageClassName") or "")


def volume_class(pv: Mapping[str, Any]) -> str:
    """``GetPersistentVolumeClass``."""
    ann = _meta(pv).get("annotations") or {}
    if ANN_BETA_STORAGE_CLASS in ann:
        return str(ann[ANN_BETA_STORAGE_CLASS])
    return str((pv.get("spec") or {}).get("storageClassName") or "")


def access_modes_string(modes: Iterable[str] | None) -> str:
    """``GetAccessModesAsString``: RWO, ROX, RWX, RWOP in that order."""
    have = set(modes or ())
    return ",".join(_SHORT_MODES[m] for m in ACCESS_MODES if m in have)


def node_affinity_matches(pv: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """``CheckNodeAffinity``: the volume's required node selector terms (ORed) against node labels."""
    required_terms = (((pv.get("spec") or {}).get("nodeAffinity") or {}).get("required") or {})
    terms = required_terms.get("nodeSelectorTerms")
    if not required_terms:
        return True
    node = {"metadata": {"labels": dict(labels)}}
    return any(term_matches(t, node) for t in terms or [])


# --- defaulting --------------------------------------------------------------------------


def default_storage_object(plural: str, obj: dict[str, Any], now: str) -> None:
    """Defaults of a created StorageClass, PersistentVolume or PersistentVolumeClaim (in place)."""
    if plural == "storageclasses":
        obj.setdefault("reclaimPolicy", "Delete")
        obj.setdefault("volumeBindingMode", "Immediate")
    elif plural == "persistentvolumes":
        spec = obj.setdefault("spec", {})
        spec.setdefault("persistentVolumeReclaimPolicy", "Retain")
        spec.setdefault("volumeMode", "Filesystem")
        # strategy PrepareForCreate: the client's status is dropped; Pending since now
        obj["status"] = {"phase": "Pending", "lastPhaseTransitionTime": now}
    elif plural == "persistentvolumeclaims":
        obj.setdefault("spec", {}).setdefault("volumeMode", "Filesystem")
        obj["status"] = {"phase": "Pending"}


# --- validation ------------------------------------------------------------------------


def _access_modes(path: str, modes: Any, detail: str) -> list[Cause]:
    if not modes:
        return [("FieldValueRequired", path, f"Required value: {detail}" if detail else "Required value")]
    if not isinstance(modes, list):
        return [invalid(path, str(modes), "must be a list")]
    return [not_supported(path, m, sorted(ACCESS_MODES)) for m in modes if m not in ACCESS_MODES]


def _volume_mode(path: str, mode: Any) -> list[Cause]:
    return [] if mode in (None, *_VOLUME_MODES) else [not_supported(path, mode, _VOLUME_MODES)]


def _claim(spec: Mapping[str, Any]) -> list[Cause]:
    out = _access_modes("spec.accessModes", spec.get("accessModes"), "at least 1 access mode is required")
    requests = ((spec.get("resources") or {}).get("requests") or {})
    if "storage" not in requests:
        out.append(required("spec.resources[storage]"))
    return out + _volume_mode("spec.volumeMode", spec.get("volumeMode"))


def _volume(spec: Mapping[str, Any]) -> list[Cause]:
    out = _access_modes("spec.accessModes", spec.get("accessModes"), "")
    if not spec.get("capacity"):
        out.append(required("spec.capacity"))
    elif "storage" not in spec["capacity"]:
        out.append(not_supported("spec.capacity", "", ("storage",)))
    policy = spec.get("persistentVolumeReclaimPolicy")
    if policy and policy not in ("Delete", "Recycle", "Retain"):
        out.append(not_supported("spec.persistentVolumeReclaimPolicy", policy, ("Delete", "Recycle", "Retain")))
    if not any(spec.get(k) for k in _VOLUME_SOURCES):
        out.append(("FieldValueRequired", "spec", "Required value: must specify a volume type"))
    if spec.get("local") and not ((spec.get("nodeAffinity") or {}).get("required")):
        out.append(("FieldValueRequired", "spec.nodeAffinity", "Required value: Local volume requires node affinity"))
    return out + _volume_mode("spec.volumeMode", spec.get("volumeMode"))


def _storage_class(sc: Mapping[str, Any], old: Mapping[str, Any] | None) -> list[Cause]:
    out: list[Cause] = []
    provisioner = sc.get("provisioner") or ""
    if not provisioner:
        out.append(required("provisioner"))
    else:
        out += [invalid("provisioner", provisioner.lower(), m) for m in validate_qualified_name(provisioner.lower())]
    policy = sc.get("reclaimPolicy")
    if policy and policy not in ("Delete", "Retain"):
        out.append(not_supported("reclaimPolicy", policy, ("Delete", "Retain")))
    mode = sc.get("volumeBindingMode", "Immediate")  # defaulted when the body is decoded
    if mode not in ("Immediate", "WaitForFirstConsumer"):
        out.append(not_supported("volumeBindingMode", mode, ("Immediate", "WaitForFirstConsumer")))
    if old is not None:
        for key in ("parameters", "provisioner", "reclaimPolicy"):
            if (sc.get(key) or None) != (old.get(key) or None):
                out.append(("FieldValueForbidden", key, f"Forbidden: updates to {key} are forbidden."))
        if mode != old.get("volumeBindingMode", "Immediate"):
            out.append(invalid("volumeBindingMode", mode, "field is immutable"))
    return out


def validate_storage_object(plural: str, obj: Mapping[str, Any], old: Mapping[str, Any] | None) -> list[Cause]:
    """The causes the API server gives for an invalid storage object (empty when valid)."""
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    if plural == "storageclasses":
        return _storage_class(obj, old)
    if plural == "persistentvolumes":
        return _volume(spec)
    if plural == "persistentvolumeclaims":
        return _claim(spec)
    return []


# --- admission -------------------------------------------------------------------------


def admit(plural: str, obj: dict[str, Any], classes: Iterable[Mapping[str, Any]]) -> None:
    """Mutating admission on create (in place): DefaultStorageClass, StorageObjectInUseProtection."""
    meta = obj.setdefault("metadata", {})
    if plural == "persistentvolumeclaims":
        spec = obj.setdefault("spec", {})
        if "storageClassName" not in spec and ANN_BETA_STORAGE_CLASS not in (meta.get("annotations") or {}):
            default = default_class(classes)
            if default is not None:
                spec["storageClassName"] = _meta(default)["name"]
        finalizer = PVC_PROTECTION
    elif plural == "persistentvolumes":
        finalizer = PV_PROTECTION
    else:
        return
    finalizers = list(meta.get("finalizers") or [])
    if finalizer not in finalizers:
        meta["finalizers"] = finalizers + [finalizer]


# --- matching a claim to a volume (component-helpers/storage/volume/pv_helpers.go) ------


def storage_request(pvc: Mapping[str, Any]) -> Decimal:
    value = (((pvc.get("spec") or {}).get("resources") or {}).get("requests") or {}).get("storage", "0")
    try:
        return parse_quantity(value)
    except QuantityError:
        return Decimal(0)


def _capacity(pv: Mapping[str, Any]) -> Decimal:
    try:
        return parse_quantity(((pv.get("spec") or {}).get("capacity") or {}).get("storage", "0"))
    except QuantityError:
        return Decimal(0)


def label_selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector (matchLabels AND matchExpressions); None matches everything."""
    if selector is None:
        return True
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for req in selector.get("matchExpressions") or []:
        key, op, values = req.get("key"), req.get("operator"), req.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def is_volume_bound_to_claim(pv: Mapping[str, Any], pvc: Mapping[str, Any]) -> bool:
    """``IsVolumeBoundToClaim``: the claimRef names the claim (and its uid, when set)."""
    ref = (pv.get("spec") or {}).get("claimRef")
    if not ref:
        return False
    meta = _meta(pvc)
    if ref.get("name") != meta.get("name") or (ref.get("namespace") or "") != (meta.get("namespace") or ""):
        return False
    return not ref.get("uid") or ref.get("uid") == meta.get("uid")


def find_matching_volume(pvc: Mapping[str, Any], volumes: Iterable[Mapping[str, Any]],
                         node_labels: Mapping[str, str] | None, delay_binding: bool,
                         excluded: frozenset[str] = frozenset()) -> Mapping[str, Any] | None:
    """``FindMatchingVolume``: the volume pre-bound to the claim, else the smallest available one
    of the claim's class that is large enough, has its access modes, matches its selector and
    (scheduler path, ``node_labels`` given) the node.  The PV controller (no node) leaves a
    claim of a WaitForFirstConsumer class to the scheduler unless it is pre-bound."""
    spec = pvc.get("spec") or {}
    wanted = storage_request(pvc)
    modes = set(spec.get("accessModes") or [])
    cls = claim_class(pvc)
    best, best_size = None, None
    for pv in volumes:
        pv_spec, name = pv.get("spec") or {}, _meta(pv).get("name", "")
        if name in excluded or (pv_spec.get("claimRef") and not is_volume_bound_to_claim(pv, pvc)):
            continue
        size = _capacity(pv)
        if size < wanted or (pv_spec.get("volumeMode") or "Filesystem") != (spec.get("volumeMode") or "Filesystem"):
            continue
        if _meta(pv).get("deletionTimestamp"):
            continue
        fits_node = node_labels is None or node_affinity_matches(pv, node_labels)
        if is_volume_bound_to_claim(pv, pvc):
            return pv if fits_node else None
        if node_labels is None and delay_binding:
            continue
        if (pv.get("status") or {}).get("phase") != "Available" or volume_class(pv) != cls or not fits_node:
            continue
        if not label_selector_matches(spec.get("selector"), _meta(pv).get("labels") or {}):
            continue
        if not modes <= set(pv_spec.get("accessModes") or []):
            continue
        if best_size is None or size < best_size:
            best, best_size = pv, size
    return best
