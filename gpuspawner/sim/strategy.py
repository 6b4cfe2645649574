"""What the registry does to an object before it is stored: defaulting and validation.
Design notes: docs/simulated-apiserver.md.
"""

from __future__ import annotations

import base64
import datetime as _dt
import json
import marshal
import re
from typing import Any, Callable

from . import storage_api, validation
from .dra import api
from .errors import bad_request, invalid
from .resources import RESOURCES
from .selectors import validate_label_value, validate_qualified_name


# --- small helpers ----------------------------------------------------------------


def clone(obj: Any) -> Any:
    """A deep copy of JSON data.

    marshal round-trips plain dicts/lists/str/numbers in C, an order of
    magnitude faster than copy.deepcopy; anything it cannot carry falls back
    to a Python walk.
    """
    try:
        return marshal.loads(marshal.dumps(obj))
    except ValueError:
        return _clone_walk(obj)


def _clone_walk(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _clone_walk(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clone_walk(v) for v in obj]
    return obj


def now_rfc3339_at(clock: Callable[[], float]) -> str:
    # metav1.Time marshals to RFC 3339 with second precision, UTC ("Z").
    return _dt.datetime.fromtimestamp(clock(), _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(value: str) -> float:
    return _dt.datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=_dt.timezone.utc).timestamp()


def key_of(namespace: str | None, name: str) -> str:
    # etcd keys are /registry/<resource>/<namespace>/<name>; listing order is
    # byte order of that key, which a "<namespace>/<name>" string reproduces.
    return f"{namespace}/{name}" if namespace else name


def parse_rv(value: Any) -> int:
    try:
        rv = int(str(value))
    except ValueError:
        raise bad_request(f'invalid resource version "{value}"') from None
    if rv < 0:
        raise bad_request(f'invalid resource version "{value}"')
    return rv


_DNS1123_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
_DNS1123_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_DNS1035_LABEL_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
    "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or "
    "'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)


_DNS1123_LABEL_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1035_LABEL_RE = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _name_errors(plural: str, name: str) -> list[str]:
    """ValidateObjectMeta's name check for each kind (pkg/apis/core/validation):
    namespaces are DNS-1123 labels, services DNS-1035 labels, events only need
    a valid path segment, everything else a DNS-1123 subdomain."""
    if plural == "namespaces":
        ok = len(name) <= 63 and _DNS1123_LABEL_RE.fullmatch(name)
        return [] if ok else [_DNS1123_LABEL_MSG]
    if plural == "services":
        ok = len(name) <= 63 and _DNS1035_LABEL_RE.fullmatch(name)
        return [] if ok else [_DNS1035_LABEL_MSG]
    if plural == "events":
        bad = name in (".", "..") or "/" in name or "%" in name
        return ["may not contain '/' or '%'"] if bad else []
    ok = len(name) <= 253 and _DNS1123_SUBDOMAIN_RE.fullmatch(name)
    return [] if ok else [_DNS1123_SUBDOMAIN_MSG]


def _go_q(value: Any) -> str:
    return json.dumps(value) if isinstance(value, str) else str(value)


# --- defaulting (what a client reads back after create) -------------------------


def _qos_class(pod: dict[str, Any]) -> str:
    """pkg/apis/core/helper/qos/qos.go GetPodQOS (requests already defaulted from limits)."""
    containers = list(pod["spec"].get("containers") or []) + list(pod["spec"].get("initContainers") or [])
    any_set = False
    guaranteed = True
    for c in containers:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        if req or lim:
            any_set = True
        for name in ("cpu", "memory"):
            if name not in lim or name not in req or str(req[name]) != str(lim[name]):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def _default_container(c: dict[str, Any]) -> None:
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    image = str(c.get("image") or "")
    if "imagePullPolicy" not in c:
        # SetDefaults_Container: Always for ":latest" or no tag, else IfNotPresent.
        last = image.rsplit("/", 1)[-1]
        tagged = ":" in last and not last.endswith(":latest")
        c["imagePullPolicy"] = "IfNotPresent" if (tagged or "@" in image) else "Always"
    res = c.setdefault("resources", {})
    limits = res.get("limits") or {}
    if limits:
        # SetDefaults_Pod: a limit without a request defaults the request to it.
        requests = res.setdefault("requests", {})
        for name, qty in limits.items():
            requests.setdefault(name, qty)
    for port in c.get("ports") or []:
        port.setdefault("protocol", "TCP")
    for env in c.get("env") or []:
        fr = env.get("valueFrom") or {}
        if "fieldRef" in fr:
            fr["fieldRef"].setdefault("apiVersion", "v1")
    for key in ("livenessProbe", "readinessProbe", "startupProbe"):
        probe = c.get(key)
        if probe:  # SetDefaults_Probe, SetDefaults_HTTPGetAction
            for name, value in (("timeoutSeconds", 1), ("periodSeconds", 10), ("successThreshold", 1),
                                ("failureThreshold", 3)):
                probe.setdefault(name, value)
            if probe.get("httpGet") is not None:
                probe["httpGet"].setdefault("path", "/")
                probe["httpGet"].setdefault("scheme", "HTTP")


def default_pod(pod: dict[str, Any]) -> None:
    spec = pod.setdefault("spec", {})
    for c in spec.get("containers") or []:
        _default_container(c)
    for c in spec.get("initContainers") or []:
        _default_container(c)
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    # ServiceAccount admission plugin.
    spec.setdefault("serviceAccountName", spec.get("serviceAccount") or "default")
    spec.setdefault("serviceAccount", spec["serviceAccountName"])
    spec.setdefault("enableServiceLinks", True)
    # Priority admission: no priorityClassName and no global default -> 0.
    spec.setdefault("priority", 0)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    for vol in spec.get("volumes") or []:
        if "secret" in vol:
            vol["secret"].setdefault("defaultMode", 420)
        if "configMap" in vol:
            vol["configMap"].setdefault("defaultMode", 420)
        for kind in ("downwardAPI", "projected"):
            if vol.get(kind) is not None:
                vol[kind].setdefault("defaultMode", 420)
    # DefaultTolerationSeconds admission plugin
    # (plugin/pkg/admission/defaulttolerationseconds/admission.go).
    tolerations = spec.setdefault("tolerations", [])
    present = {(t.get("key"), t.get("effect")) for t in tolerations}
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        if (key, "NoExecute") not in present and not any(
            t.get("operator") == "Exists" and not t.get("key") for t in tolerations
        ):
            tolerations.append(
                {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            )
    # pod strategy PrepareForCreate: the client's status is discarded.
    pod["status"] = {"phase": "Pending", "qosClass": _qos_class(pod)}


def _default_service(svc: dict[str, Any], ip: str) -> None:
    spec = svc.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    if spec.get("clusterIP") != "None":
        spec.setdefault("clusterIP", ip)
    spec.setdefault("clusterIPs", [spec["clusterIP"]])
    spec.setdefault("ipFamilies", ["IPv4"])
    spec.setdefault("ipFamilyPolicy", "SingleStack")
    spec.setdefault("internalTrafficPolicy", "Cluster")
    for port in spec.get("ports") or []:
        port.setdefault("protocol", "TCP")
        port.setdefault("targetPort", port.get("port"))
    svc["status"] = {"loadBalancer": {}}


def default_object(plural: str, obj: dict[str, Any], next_cluster_ip: Callable[[], str]) -> None:
    meta = obj["metadata"]
    api.prepare_for_create(plural, obj)
    if plural == "pods":
        default_pod(obj)
    elif plural == "namespaces":
        # NamespaceDefaultLabelName (GA 1.22) and the "kubernetes" finalizer.
        meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        obj["status"] = {"phase": "Active"}
    elif plural == "services":
        _default_service(obj, next_cluster_ip())
    elif plural in ("persistentvolumeclaims", "persistentvolumes", "storageclasses"):
        storage_api.default_storage_object(plural, obj, meta.get("creationTimestamp") or "")
    elif plural == "secrets":
        obj.setdefault("type", "Opaque")
        string_data = obj.pop("stringData", None)
        if isinstance(string_data, dict):
            data = obj.setdefault("data", {})
            for k, v in string_data.items():
                data[k] = base64.b64encode(str(v).encode()).decode()
    elif plural == "events":
        obj.setdefault("involvedObject", {})
        obj.setdefault("reportingComponent", "")
        obj.setdefault("reportingInstance", "")


def validate_object(plural: str, obj: dict[str, Any], *, on_create: bool,
                    old: dict[str, Any] | None = None) -> None:
    """The subset of pkg/apis/core/validation that clients trip over (``old``: the object an
    update replaces).  API defaulting runs first, as the server defaults what it decodes."""
    info = RESOURCES[plural]
    api.default_spec(plural, obj)
    meta = obj["metadata"]
    name = meta.get("name") or ""
    causes: list[tuple[str, str, str]] = []
    if not name:
        causes.append(("FieldValueRequired", "metadata.name", "Required value: name or generateName is required"))
    else:
        for msg in _name_errors(plural, name):
            causes.append(("FieldValueInvalid", "metadata.name", f"Invalid value: {_go_q(name)}: {msg}"))
    labels = meta.get("labels")
    if labels is not None and not isinstance(labels, dict):
        causes.append(("FieldValueInvalid", "metadata.labels", "Invalid value: must be an object"))
    for k, v in (labels or {}).items():
        for msg in validate_qualified_name(str(k)):
            causes.append(("FieldValueInvalid", "metadata.labels", f"Invalid value: {_go_q(k)}: {msg}"))
        if not isinstance(v, str):
            causes.append(("FieldValueInvalid", f"metadata.labels[{k}]", "Invalid value: must be a string"))
            continue
        for msg in validate_label_value(v):
            causes.append(("FieldValueInvalid", "metadata.labels", f"Invalid value: {_go_q(v)}: {msg}"))
    causes += validation.annotations(meta.get("annotations"))
    causes += validation.owner_references(meta.get("ownerReferences"))
    causes += validation.finalizers(meta.get("finalizers"))
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    if plural == "nodes":
        causes += validation.taints(spec.get("taints"))
    if plural == "pods":
        causes += validation.tolerations(spec.get("tolerations"))
    causes += storage_api.validate_storage_object(plural, obj, None if on_create else old)
    if plural == "pods" and on_create:
        containers = (obj.get("spec") or {}).get("containers")
        if not containers:
            causes.append(("FieldValueRequired", "spec.containers", "Required value"))
        else:
            seen: set[str] = set()
            for i, c in enumerate(containers):
                if not isinstance(c, dict):
                    causes.append(("FieldValueInvalid", f"spec.containers[{i}]", "Invalid value: must be an object"))
                    continue
                cname = c.get("name")
                if not cname:
                    causes.append(("FieldValueRequired", f"spec.containers[{i}].name", "Required value"))
                elif cname in seen:
                    causes.append(("FieldValueDuplicate", f"spec.containers[{i}].name",
                                   f"Duplicate value: {_go_q(cname)}"))
                else:
                    seen.add(cname)
                if not c.get("image"):
                    causes.append(("FieldValueRequired", f"spec.containers[{i}].image", "Required value"))
    if plural in api.PLURALS:
        causes += api.validate(plural, obj, old)
    if causes:
        raise invalid(info.kind, name, causes, info.group)


def validate_status_update(plural: str, new: dict[str, Any], old: dict[str, Any]) -> None:
    """Status-only updates of the kinds whose status has rules (``ResourceClaim``)."""
    causes = api.validate_status(plural, new, old)
    if causes:
        info = RESOURCES[plural]
        raise invalid(info.kind, new["metadata"].get("name") or "", causes, info.group)

