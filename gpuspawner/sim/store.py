"""The simulated cluster's object store: an etcd + registry + watch cache in one.

Objects are plain JSON dicts, exactly as they travel over the wire.  Every
write bumps one global revision (``Store.resource_version``), as etcd's
revision does, and is delivered in revision order to the matching watchers.
The in-process watchers (:meth:`Store.watch`) are what the simulated scheduler
and kubelet use; the HTTP watch of ``apiserver.py`` is built on them.

Stored dicts are never mutated after they are stored: a write stores a new
dict.  That lets lists and watch events share them without copying; the
public methods hand out deep copies, so callers may change what they get.

What follows the real kube-apiserver, with the source of each rule:

* errors and their messages: ``k8s.io/apimachinery/pkg/api/errors/errors.go``;
* create/update/delete flow, preconditions, no-op updates that do not bump
  the revision, graceful deletion and finalizers:
  ``k8s.io/apiserver/pkg/registry/generic/registry/store.go``,
  ``k8s.io/apiserver/pkg/registry/rest/delete.go`` and
  ``k8s.io/apiserver/pkg/storage/etcd3/store.go``;
* pod grace periods: ``pkg/registry/core/pod/strategy.go`` (CheckGracefulDelete);
* pod defaulting: ``pkg/apis/core/v1/defaults.go`` plus the admission plugins
  that every cluster runs (ServiceAccount, DefaultTolerationSeconds, Priority);
* the watch cache's history, selector transitions and "too old resource
  version": ``k8s.io/apiserver/pkg/storage/cacher/{watch_cache,cache_watcher}.go``;
* paging and continue tokens: ``k8s.io/apiserver/pkg/storage/continue.go`` and
  the Kubernetes API concepts page, "Retrieving large results sets in chunks".
"""

from __future__ import annotations

import asyncio
import base64
import bisect
import collections
import datetime as _dt
import json
import marshal
import random
import re
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Generator, Iterator

from . import patching
from .selectors import (
    FieldSelector,
    LabelSelector,
    SelectorError,
    parse_field_selector,
    parse_label_selector,
    validate_label_value,
    validate_qualified_name,
)

__all__ = ["ApiError", "Store", "Watcher", "ResourceInfo", "RESOURCES", "DEFAULT_NAMESPACES"]


# --- resources ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResourceInfo:
    plural: str
    singular: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    status_subresource: bool = False
    # the delete response carries the object (ReturnDeletedObject in
    # pkg/registry/core/<kind>/storage/storage.go; a Success Status otherwise)
    returns_deleted_object: bool = False

    @property
    def list_kind(self) -> str:
        return self.kind + "List"


RESOURCES: dict[str, ResourceInfo] = {
    r.plural: r
    for r in (
        ResourceInfo("configmaps", "configmap", "ConfigMap", True, ("cm",)),
        ResourceInfo("events", "event", "Event", True, ("ev",)),
        ResourceInfo("namespaces", "namespace", "Namespace", False, ("ns",), True, True),
        ResourceInfo("nodes", "node", "Node", False, ("no",), True),
        ResourceInfo("persistentvolumeclaims", "persistentvolumeclaim", "PersistentVolumeClaim",
                     True, ("pvc",), True, True),
        # No kind served here keeps metadata.generation in 1.32, the version
        # /version reports (pods gained it in 1.33, KEP-5067).
        ResourceInfo("pods", "pod", "Pod", True, ("po",), True, True),
        ResourceInfo("secrets", "secret", "Secret", True),
        ResourceInfo("serviceaccounts", "serviceaccount", "ServiceAccount", True, ("sa",), False, True),
        ResourceInfo("services", "service", "Service", True, ("svc",), True, True),
    )
}

DEFAULT_NAMESPACES = ("default", "kube-node-lease", "kube-public", "kube-system")
# plugin/pkg/admission/namespace/lifecycle: these may not be deleted.
IMMORTAL_NAMESPACES = frozenset({"default", "kube-system", "kube-public"})

# k8s.io/apiserver/pkg/storage/names/generate.go: 5 characters from the
# alphabet of k8s.io/apimachinery/pkg/util/rand (no vowels, no 0/1/3).
GENERATE_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_MAX_GENERATED_BASE = 63 - 5


# --- errors ---------------------------------------------------------------------


class ApiError(Exception):
    """A failure the real API server reports as a ``kind: Status`` body."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        retry_after: int | None = None,
        continue_token: str | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.retry_after = retry_after
        self.continue_token = continue_token

    def status(self) -> dict[str, Any]:
        meta: dict[str, Any] = {}
        if self.continue_token:
            meta["continue"] = self.continue_token
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": meta,
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
        }
        details = dict(self.details or {})
        if self.retry_after is not None:
            details["retryAfterSeconds"] = self.retry_after
        if details:
            body["details"] = details
        body["code"] = self.code
        return body

    def __repr__(self) -> str:
        return f"ApiError({self.code}, {self.reason!r}, {self.message!r})"


def not_found(plural: str, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{plural} "{name}" not found', details={"name": name, "kind": plural})


def already_exists(plural: str, name: str) -> ApiError:
    return ApiError(409, "AlreadyExists", f'{plural} "{name}" already exists',
                    details={"name": name, "kind": plural})


def conflict(plural: str, name: str, why: str) -> ApiError:
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {plural} "{name}": {why}',
                    details={"name": name, "kind": plural})


_MODIFIED = "the object has been modified; please apply your changes to the latest version and try again"


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def invalid(kind: str, name: str, causes: list[tuple[str, str, str]]) -> ApiError:
    """422 Invalid: ``causes`` are (reason, field, message) as field.Error renders them."""
    texts = [f"{f}: {m}" for _, f, m in causes]
    joined = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    details: dict[str, Any] = {"kind": kind}
    if name:
        details["name"] = name
    details["causes"] = [{"reason": r, "message": m, "field": f} for r, f, m in causes]
    return ApiError(422, "Invalid", f'{kind} "{name}" is invalid: {joined}', details=details)


def expired(message: str, continue_token: str | None = None) -> ApiError:
    return ApiError(410, "Expired", message, continue_token=continue_token)


# k8s.io/apiserver/pkg/storage/etcd3/store.go
LIST_EXPIRED = "The resourceVersion for the provided list is too old."
CONTINUE_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter, or use the continue token in this "
    "response to retrieve the remainder of the results. Continuing with the provided token "
    "results in an inconsistent list - objects that were created, modified, or deleted between "
    "the time the first chunk was returned and now may show up in the list."
)


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


def _now_rfc3339(clock: Callable[[], float]) -> str:
    # metav1.Time marshals to RFC 3339 with second precision, UTC ("Z").
    return _dt.datetime.fromtimestamp(clock(), _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_rfc3339(value: str) -> float:
    return _dt.datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=_dt.timezone.utc).timestamp()


def _key(namespace: str | None, name: str) -> str:
    # etcd keys are /registry/<resource>/<namespace>/<name>; listing order is
    # byte order of that key, which a "<namespace>/<name>" string reproduces.
    return f"{namespace}/{name}" if namespace else name


def _parse_rv(value: Any) -> int:
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


def _default_object(plural: str, obj: dict[str, Any], store: "Store") -> None:
    meta = obj["metadata"]
    if plural == "pods":
        default_pod(obj)
    elif plural == "namespaces":
        # NamespaceDefaultLabelName (GA 1.22) and the "kubernetes" finalizer.
        meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        obj["status"] = {"phase": "Active"}
    elif plural == "services":
        _default_service(obj, store._next_cluster_ip())
    elif plural == "persistentvolumeclaims":
        obj.setdefault("spec", {}).setdefault("volumeMode", "Filesystem")
        obj["status"] = {"phase": "Pending"}
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


def _validate(plural: str, obj: dict[str, Any], *, on_create: bool) -> None:
    """The subset of pkg/apis/core/validation that clients trip over."""
    info = RESOURCES[plural]
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
    for k in meta.get("annotations") or {}:
        for msg in validate_qualified_name(str(k)):
            causes.append(("FieldValueInvalid", "metadata.annotations", f"Invalid value: {_go_q(k)}: {msg}"))
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
    if causes:
        raise invalid(info.kind, name, causes)


# --- history and watchers ---------------------------------------------------------


@dataclass(slots=True)
class _Change:
    """One revision: what a watch cache keeps per event."""

    rev: int
    type: str  # ADDED | MODIFIED | DELETED
    plural: str
    key: str
    obj: dict[str, Any]  # the new state; for DELETED, the last state stamped with rev
    prev: dict[str, Any] | None  # the state before; None for ADDED


class Watcher:
    """An async iterator of watch events for one resource, namespace and selectors.

    Yields ``{"type": "ADDED"|"MODIFIED"|"DELETED"|"BOOKMARK", "object": {...}}``
    in revision order.  ``close()`` ends the iteration at once; events still
    queued are dropped (a consumer resumes from the last resourceVersion it
    saw, as after any watch that ends).  The queue is unbounded: the real
    cacher's termination of watchers that fall too far behind is not modelled.
    """

    def __init__(
        self,
        store: "Store",
        info: ResourceInfo,
        namespace: str | None,
        labels: LabelSelector,
        fields: FieldSelector,
        allow_bookmarks: bool,
        copy_objects: bool = True,
    ) -> None:
        self._store = store
        self.info = info
        self.namespace = namespace
        self._labels = labels
        self._fields = fields
        self.allow_bookmarks = allow_bookmarks
        self._copy = copy_objects
        self._pending: collections.deque[tuple[str, dict[str, Any]]] = collections.deque()
        self._wakeup = asyncio.Event()
        self._closed = False
        # the newest revision this watcher has been shown (delivered or filtered out)
        self.resource_version = store.resource_version
        self.bookmark_interval: float = store.bookmark_interval
        self._next_bookmark = time.monotonic() + self.bookmark_interval
        self.deadline: float | None = None  # monotonic; set by a timeoutSeconds watch
        self._pre_deadline_sent = False

    # -- matching (cache_watcher.go convertToWatchEvent) --
    def matches(self, obj: dict[str, Any]) -> bool:
        meta = obj.get("metadata") or {}
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        if not self._labels.empty and not self._labels.matches(meta.get("labels")):
            return False
        if not self._fields.empty and not self._fields.matches(obj):
            return False
        return True

    def _offer(self, ch: _Change) -> None:
        if self._closed:
            return
        self.resource_version = ch.rev
        if ch.type == "ADDED":
            if self.matches(ch.obj):
                self._pending.append(("ADDED", ch.obj))
        elif ch.type == "DELETED":
            if self.matches(ch.obj):
                self._pending.append(("DELETED", ch.obj))
        else:
            cur = self.matches(ch.obj)
            prev = ch.prev is not None and self.matches(ch.prev)
            if cur and prev:
                self._pending.append(("MODIFIED", ch.obj))
            elif cur:
                self._pending.append(("ADDED", ch.obj))
            elif prev:
                # The old object, stamped with the revision of the change that
                # took it out of the selection (cache_watcher.go).
                assert ch.prev is not None
                gone = dict(ch.prev)
                gone["metadata"] = dict(ch.prev["metadata"], resourceVersion=str(ch.rev))
                self._pending.append(("DELETED", gone))
            else:
                return
        self._wakeup.set()

    def _queue_initial(self, obj: dict[str, Any]) -> None:
        self._pending.append(("ADDED", obj))

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._pending.clear()
            self._store._watchers.discard(self)
            self._wakeup.set()

    def __aiter__(self) -> "Watcher":
        return self

    def _bookmark(self) -> tuple[str, dict[str, Any]]:
        # A bookmark carries only the kind and metadata.resourceVersion
        # (watch.Bookmark events of the cacher); every event up to that
        # revision has been delivered already, since the queue is empty.
        rv = self._store.resource_version
        return "BOOKMARK", {
            "kind": self.info.kind,
            "apiVersion": "v1",
            "metadata": {"resourceVersion": str(rv)},
        }

    def set_bookmark_interval(self, seconds: float) -> None:
        """Send bookmarks every ``seconds`` from now (the store's interval by default)."""
        self.bookmark_interval = seconds
        self._next_bookmark = time.monotonic() + seconds

    def set_timeout(self, seconds: float) -> None:
        """Note the deadline of a ``timeoutSeconds`` watch (for the last bookmark)."""
        self.deadline = time.monotonic() + seconds
        # cache_watcher.go nextBookmarkTime: no pre-timeout bookmark when the
        # deadline is less than 2 s away.
        self._pre_deadline_sent = seconds < 2.0

    def _bookmark_due(self, now: float) -> float | None:
        """Seconds until the next bookmark, or None when none will come.

        cache_watcher.go nextBookmarkTime: about every minute, and 2 s before
        the watch's deadline so a client that times out resumes from "now".
        """
        if not self.allow_bookmarks:
            return None
        due = self._next_bookmark
        if self.deadline is not None and not self._pre_deadline_sent:
            due = min(due, self.deadline - 2.0)
        return max(0.0, due - now)

    async def next_raw(self, timeout: float | None = None) -> tuple[str, dict[str, Any]] | None:
        """The next event without copying, or None on close / when ``timeout`` passes."""
        loop_deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._closed:
                return None
            now = time.monotonic()
            if self._pending:
                return self._pending.popleft()
            wait = self._bookmark_due(now)
            if wait is not None and wait <= 0:
                if self.deadline is not None and self.deadline - 2.0 <= now:
                    self._pre_deadline_sent = True
                self._next_bookmark = now + self.bookmark_interval
                return self._bookmark()
            if loop_deadline is not None:
                left = loop_deadline - now
                if left <= 0:
                    return None
                wait = left if wait is None else min(wait, left)
            self._wakeup.clear()
            if self._pending or self._closed:
                continue
            if wait is None:
                await self._wakeup.wait()
            else:
                try:
                    await asyncio.wait_for(self._wakeup.wait(), wait)
                except asyncio.TimeoutError:
                    pass

    async def __anext__(self) -> dict[str, Any]:
        item = await self.next_raw()
        if item is None:
            raise StopAsyncIteration
        etype, obj = item
        return {"type": etype, "object": clone(obj) if self._copy else obj}

    @property
    def pending(self) -> int:
        return len(self._pending)


# --- the store ----------------------------------------------------------------------


class Store:
    """All objects of the simulated cluster, with etcd-like revisions and watches.

    ``history`` is how many revisions the watch cache keeps (watch resume and
    continue tokens older than that get 410 Expired).  ``clock`` returns epoch
    seconds (timestamps, grace periods); ``rng`` makes generated names
    reproducible.
    """

    def __init__(
        self,
        *,
        history: int = 5000,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        bookmark_interval: float = 60.0,
        default_namespaces: bool = True,
    ) -> None:
        if history < 1:
            raise ValueError("history must be at least 1 revision")
        self.resource_version = 0
        self.history_size = history
        self.bookmark_interval = bookmark_interval
        self._clock = clock
        self._rng = rng or random.Random()
        self._objects: dict[str, dict[str, dict[str, Any]]] = {p: {} for p in RESOURCES}
        self._keys: dict[str, list[str]] = {p: [] for p in RESOURCES}
        self._history: collections.deque[_Change] = collections.deque(maxlen=history)
        self._watchers: set[Watcher] = set()
        self._ip_counter = 0
        if default_namespaces:
            for ns in DEFAULT_NAMESPACES:
                self.create("namespaces", {"metadata": {"name": ns}})

    # -- lookup helpers --
    @staticmethod
    def resource(plural: str) -> ResourceInfo:
        info = RESOURCES.get(plural)
        if info is None:
            raise ApiError(404, "NotFound",
                           f'the server could not find the requested resource ("{plural}" is not served; '
                           f'use one of {", ".join(sorted(RESOURCES))})', details={})
        return info

    def _scope(self, info: ResourceInfo, namespace: str | None, *, required: bool) -> str | None:
        if not info.namespaced:
            return None
        if namespace is None and required:
            return "default"
        return namespace

    def _next_cluster_ip(self) -> str:
        self._ip_counter += 1
        n = self._ip_counter
        return f"10.96.{(n // 254) % 256}.{n % 254 + 1}"

    def now(self) -> str:
        return _now_rfc3339(self._clock)

    # -- the write path: one revision per call --
    def _commit(self, ctype: str, info: ResourceInfo, key: str, obj: dict[str, Any] | None,
                prev: dict[str, Any] | None) -> dict[str, Any]:
        self.resource_version += 1
        rev = self.resource_version
        objects, keys = self._objects[info.plural], self._keys[info.plural]
        if ctype == "DELETED":
            assert prev is not None
            stored = dict(prev)
            stored["metadata"] = dict(prev["metadata"], resourceVersion=str(rev))
            del objects[key]
            idx = bisect.bisect_left(keys, key)
            if idx < len(keys) and keys[idx] == key:
                keys.pop(idx)
        else:
            assert obj is not None
            obj["metadata"]["resourceVersion"] = str(rev)
            stored = obj
            if key not in objects:
                bisect.insort(keys, key)
            objects[key] = stored
        change = _Change(rev, ctype, info.plural, key, stored, prev)
        self._history.append(change)
        for w in list(self._watchers):
            if w.info.plural == info.plural:
                w._offer(change)
            else:
                w.resource_version = rev
        return stored

    def _get_stored(self, info: ResourceInfo, name: str, namespace: str | None) -> tuple[str, dict[str, Any]]:
        key = _key(namespace, name)
        obj = self._objects[info.plural].get(key)
        if obj is None:
            raise not_found(info.plural, name)
        return key, obj

    def _check_namespace(self, namespace: str) -> None:
        if namespace not in self._objects["namespaces"]:
            raise not_found("namespaces", namespace)

    # -- verbs --
    def create(self, plural: str, obj: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        info = self.resource(plural)
        if not isinstance(obj, dict):
            raise bad_request(f"the body of the request must be a {info.kind} object")
        obj = clone(obj)
        self._check_type(info, obj)
        meta = obj.get("metadata")
        if meta is None:
            meta = obj["metadata"] = {}
        if not isinstance(meta, dict):
            raise bad_request("metadata must be an object")
        if info.namespaced:
            body_ns = meta.get("namespace")
            if namespace is None:
                namespace = body_ns or "default"
            elif body_ns and body_ns != namespace:
                raise bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = namespace
            self._check_namespace(namespace)
        else:
            meta.pop("namespace", None)
        for server_owned in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp",
                             "deletionGracePeriodSeconds", "generation", "selfLink", "managedFields"):
            meta.pop(server_owned, None)
        generated = not meta.get("name") and bool(meta.get("generateName"))
        if generated:
            meta["name"] = self._generate_name(info, namespace, str(meta["generateName"]))
        _validate(plural, obj, on_create=True)
        key = _key(namespace, meta["name"])
        if key in self._objects[plural]:
            raise already_exists(plural, meta["name"])
        meta["uid"] = str(uuid.UUID(int=self._rng.getrandbits(128), version=4))
        meta["creationTimestamp"] = self.now()
        obj["kind"], obj["apiVersion"] = info.kind, "v1"
        _default_object(plural, obj, self)
        stored = self._commit("ADDED", info, key, obj, None)
        if plural == "namespaces":
            # The serviceaccounts controller creates "default" in every new
            # namespace (moments later in a real cluster; here at once).
            self.create("serviceaccounts", {"metadata": {"name": "default"}}, meta["name"])
        return clone(stored)

    def _generate_name(self, info: ResourceInfo, namespace: str | None, base: str) -> str:
        base = base[:_MAX_GENERATED_BASE]
        # Retried on collision, as the registry does since RetryGenerateName (1.31).
        for _ in range(8):
            name = base + "".join(self._rng.choice(GENERATE_NAME_ALPHABET) for _ in range(5))
            if _key(namespace, name) not in self._objects[info.plural]:
                return name
        return name

    @staticmethod
    def _check_type(info: ResourceInfo, obj: dict[str, Any]) -> None:
        kind, api_version = obj.get("kind"), obj.get("apiVersion")
        if api_version not in (None, "", "v1"):
            raise bad_request(
                f"the API version in the data ({api_version}) does not match the expected API version (v1)"
            )
        if kind not in (None, "", info.kind):
            raise bad_request(
                f"the kind in the data ({kind}) does not match the expected kind ({info.kind})"
            )

    def get(self, plural: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        info = self.resource(plural)
        ns = self._scope(info, namespace, required=True)
        return clone(self._get_stored(info, name, ns)[1])

    def replace(self, plural: str, name: str, obj: dict[str, Any], namespace: str | None = None,
                subresource: str | None = None) -> dict[str, Any]:
        info = self.resource(plural)
        ns = self._scope(info, namespace, required=True)
        if not isinstance(obj, dict):
            raise bad_request(f"the body of the request must be a {info.kind} object")
        return clone(self._update(info, name, ns, clone(obj), subresource))

    def _update(self, info: ResourceInfo, name: str, ns: str | None, new: dict[str, Any],
                subresource: str | None) -> dict[str, Any]:
        if subresource not in (None, "status"):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if subresource == "status" and not info.status_subresource:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        self._check_type(info, new)
        meta = new.get("metadata")
        # A fresh metadata dict: a patched object shares untouched parts with
        # the stored one, and stored objects are never written to.
        meta = new["metadata"] = dict(meta) if isinstance(meta, dict) else {}
        if meta.get("name") not in (None, "", name):
            raise bad_request(
                f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})"
            )
        if info.namespaced and meta.get("namespace") not in (None, "", ns):
            raise bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        key, old = self._get_stored(info, name, ns)
        want_rv = meta.get("resourceVersion")
        if want_rv not in (None, "") and str(want_rv) != old["metadata"]["resourceVersion"]:
            raise conflict(info.plural, name, _MODIFIED)
        if subresource == "status":
            # Status updates change status only (ResetObjectMetaForStatus + strategy).
            merged = dict(old)
            if "status" in new:
                merged["status"] = new["status"]
            new = merged
            new["metadata"] = dict(old["metadata"])
        else:
            if info.status_subresource:
                if "status" in old:
                    new["status"] = old["status"]
                else:
                    new.pop("status", None)
            # Fields a client cannot change (ObjectMetaUpdateValidation + registry).
            for k in ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp",
                      "deletionGracePeriodSeconds", "generation", "resourceVersion"):
                if k in old["metadata"]:
                    meta[k] = old["metadata"][k]
                else:
                    meta.pop(k, None)
            if info.plural == "pods" and new.get("spec", {}).get("nodeName") != old["spec"].get("nodeName") \
                    and old["spec"].get("nodeName"):
                raise invalid(info.kind, name, [(
                    "FieldValueForbidden", "spec",
                    "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
                    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
                    "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
                    "(allow it to be set to 1 if it was previously negative)",
                )])
            new["kind"], new["apiVersion"] = info.kind, "v1"
            _validate(info.plural, new, on_create=False)
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        if new == old:
            # etcd3 GuaranteedUpdate: identical bytes are not written, no new revision.
            return old
        m = new["metadata"]
        if m.get("deletionTimestamp") and not m.get("finalizers") and m.get("deletionGracePeriodSeconds") == 0:
            # registry Store.Update shouldDeleteDuringUpdate: the last finalizer is gone.
            return self._commit("DELETED", info, key, None, new)
        return self._commit("MODIFIED", info, key, new, old)

    def patch(self, plural: str, name: str, body: Any, content_type: str, namespace: str | None = None,
              subresource: str | None = None) -> dict[str, Any]:
        info = self.resource(plural)
        ns = self._scope(info, namespace, required=True)
        _, old = self._get_stored(info, name, ns)
        try:
            new = patching.apply_patch(old, body, content_type)
        except patching.PatchError as e:
            reason = {400: "BadRequest", 415: "UnsupportedMediaType", 422: "Invalid"}.get(e.code, "BadRequest")
            raise ApiError(e.code, reason, e.message) from None
        # The patched object shares untouched subtrees with the stored one.
        new = clone(new)
        if not isinstance(new.get("metadata"), dict):
            new["metadata"] = {}
        # A patch that does not mention resourceVersion carries the current one
        # (the patcher applies it to the live object), so it never conflicts.
        return clone(self._update(info, name, ns, new, subresource))

    def delete(self, plural: str, name: str, namespace: str | None = None,
               grace_period_seconds: int | None = None, *,
               preconditions: dict[str, Any] | None = None) -> dict[str, Any]:
        """Delete; returns the object (kinds with ReturnDeletedObject) or a Success Status."""
        info = self.resource(plural)
        ns = self._scope(info, namespace, required=True)
        key, old = self._get_stored(info, name, ns)
        self._check_preconditions(info, name, old, preconditions)
        if grace_period_seconds is not None and grace_period_seconds < 0:
            grace_period_seconds = 1  # rest.BeforeDelete: negative means "as soon as possible"
        meta = old["metadata"]
        if plural == "namespaces":
            if name in IMMORTAL_NAMESPACES:
                # The NamespaceLifecycle admission plugin.
                raise ApiError(403, "Forbidden", f'namespaces "{name}" is forbidden: this namespace may not be deleted',
                               details={"name": name, "kind": "namespaces"})
            self._delete_namespace_contents(name)
        if plural == "pods":
            result = self._delete_pod(info, key, old, grace_period_seconds)
        elif meta.get("finalizers"):
            if meta.get("deletionTimestamp"):
                result = old
            else:
                upd = dict(old)
                upd["metadata"] = dict(meta, deletionTimestamp=self.now(), deletionGracePeriodSeconds=0)
                result = self._commit("MODIFIED", info, key, upd, old)
        else:
            result = self._commit("DELETED", info, key, None, old)
        return self._delete_response(info, name, result)

    def _check_preconditions(self, info: ResourceInfo, name: str, old: dict[str, Any],
                             pre: dict[str, Any] | None) -> None:
        if not pre:
            return
        meta = old["metadata"]
        if pre.get("uid") and pre["uid"] != meta.get("uid"):
            raise conflict(info.plural, name,
                           f"Precondition failed: UID in precondition: {pre['uid']}, "
                           f"UID in object meta: {meta.get('uid')}")
        if pre.get("resourceVersion") and str(pre["resourceVersion"]) != meta.get("resourceVersion"):
            raise conflict(info.plural, name,
                           f"Precondition failed: ResourceVersion in precondition: {pre['resourceVersion']}, "
                           f"ResourceVersion in object meta: {meta.get('resourceVersion')}")

    def _delete_response(self, info: ResourceInfo, name: str, obj: dict[str, Any]) -> dict[str, Any]:
        if info.returns_deleted_object or obj["metadata"].get("deletionTimestamp"):
            return clone(obj)
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {"name": name, "kind": info.plural, "uid": obj["metadata"].get("uid")},
        }

    def _delete_pod(self, info: ResourceInfo, key: str, old: dict[str, Any], grace: int | None) -> dict[str, Any]:
        meta, spec, status = old["metadata"], old.get("spec") or {}, old.get("status") or {}
        # pod strategy CheckGracefulDelete: default to the pod's own period;
        # an unscheduled or terminated pod goes at once.
        if grace is None:
            grace = int(spec.get("terminationGracePeriodSeconds", 30))
        if not spec.get("nodeName") or status.get("phase") in ("Succeeded", "Failed"):
            grace = 0
        current = meta.get("deletionGracePeriodSeconds")
        if meta.get("deletionTimestamp"):
            # rest.BeforeDelete: an object already being deleted may only have
            # its grace period shortened.
            if current is None or current == 0 or grace >= current:
                if current == 0 and not meta.get("finalizers"):
                    return self._commit("DELETED", info, key, None, old)
                return old
            started = _parse_rfc3339(meta["deletionTimestamp"]) - current
            new_ts = _now_rfc3339(lambda: started + grace)
        else:
            new_ts = _now_rfc3339(lambda: self._clock() + grace)
        if grace == 0 and not meta.get("finalizers"):
            return self._commit("DELETED", info, key, None, old)
        upd = dict(old)
        upd["metadata"] = dict(meta, deletionTimestamp=new_ts, deletionGracePeriodSeconds=grace)
        return self._commit("MODIFIED", info, key, upd, old)

    def _delete_namespace_contents(self, namespace: str) -> None:
        # The namespace controller empties a deleted namespace; here it happens
        # at once and the namespace does not linger in "Terminating".
        prefix = namespace + "/"
        for plural, info in RESOURCES.items():
            if not info.namespaced:
                continue
            keys = self._keys[plural]
            start = bisect.bisect_left(keys, prefix)
            doomed = []
            for k in keys[start:]:
                if not k.startswith(prefix):
                    break
                doomed.append(k)
            for k in doomed:
                self._commit("DELETED", info, k, None, self._objects[plural][k])

    def finalize_delete(self, plural: str, name: str, namespace: str | None = None) -> None:
        """The kubelet's last step: remove a pod whose containers have stopped.

        The kubelet does this with a DELETE at grace 0; with finalizers left the
        pod stays (grace 0) until an update removes the last one.
        """
        info = self.resource(plural)
        ns = self._scope(info, namespace, required=True)
        key, old = self._get_stored(info, name, ns)
        meta = old["metadata"]
        if meta.get("finalizers"):
            if meta.get("deletionGracePeriodSeconds") != 0 or not meta.get("deletionTimestamp"):
                upd = dict(old)
                upd["metadata"] = dict(meta, deletionTimestamp=meta.get("deletionTimestamp") or self.now(),
                                       deletionGracePeriodSeconds=0)
                self._commit("MODIFIED", info, key, upd, old)
            return
        self._commit("DELETED", info, key, None, old)

    def bind(self, name: str, node_name: str, namespace: str | None = None,
             annotations: dict[str, str] | None = None) -> dict[str, Any]:
        """``POST pods/{name}/binding``: set spec.nodeName and PodScheduled=True.

        pkg/registry/core/pod/storage/storage.go (BindingREST, setPodHostAndAnnotations).
        """
        info = RESOURCES["pods"]
        ns = namespace or "default"
        if not node_name:
            raise invalid("Binding", name, [("FieldValueRequired", "target.name", "Required value")])
        key, old = self._get_stored(info, name, ns)
        meta, spec = old["metadata"], old.get("spec") or {}
        if meta.get("deletionTimestamp"):
            raise conflict("pods/binding", name, f"pod {name} is being deleted, cannot be assigned to a host")
        if spec.get("nodeName"):
            raise conflict("pods/binding", name, f'pod {name} is already assigned to node "{spec["nodeName"]}"')
        new = dict(old)
        new["metadata"] = dict(meta)
        if annotations:
            new["metadata"]["annotations"] = dict(meta.get("annotations") or {}, **annotations)
        new["spec"] = dict(spec, nodeName=node_name)
        status = dict(old.get("status") or {})
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
        conditions.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                           "lastTransitionTime": self.now()})
        status["conditions"] = conditions
        new["status"] = status
        self._commit("MODIFIED", info, key, new, old)
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    # -- list ---------------------------------------------------------------------------
    def list(self, plural: str, namespace: str | None = None, label_selector: str | None = None,
             field_selector: str | None = None, limit: int | None = None,
             continue_token: str | None = None, resource_version: str | None = None, *,
             resource_version_match: str | None = None) -> dict[str, Any]:
        """A ``<Kind>List`` with deep copies of the items."""
        meta, items = self.list_page(plural, namespace, label_selector, field_selector, limit,
                                     continue_token, resource_version,
                                     resource_version_match=resource_version_match)
        info = RESOURCES[plural]
        return {"kind": info.list_kind, "apiVersion": "v1", "metadata": meta,
                "items": [clone(i) for i in items]}

    def parse_selectors(self, plural: str, label_selector: str | None,
                        field_selector: str | None) -> tuple[LabelSelector, FieldSelector]:
        try:
            return (parse_label_selector(label_selector), parse_field_selector(field_selector, plural))
        except SelectorError as e:
            raise bad_request(str(e)) from None

    def list_page(self, plural: str, namespace: str | None = None, label_selector: str | None = None,
                  field_selector: str | None = None, limit: int | None = None,
                  continue_token: str | None = None,
                  resource_version: str | None = None, *,
                  resource_version_match: str | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The list metadata and the stored items (shared, not copied: read only).

        :meth:`list` copies them; the API server serializes them directly.
        Items carry no ``kind``/``apiVersion``, like the real server's lists.
        """
        scan = self._list_scan(plural, namespace, label_selector, field_selector, limit, continue_token,
                               resource_version, resource_version_match, checkpoint=0)
        try:
            while True:
                next(scan)
        except StopIteration as done:
            return done.value

    async def list_page_async(self, plural: str, namespace: str | None = None,
                              label_selector: str | None = None, field_selector: str | None = None,
                              limit: int | None = None, continue_token: str | None = None,
                              resource_version: str | None = None, *,
                              resource_version_match: str | None = None,
                              checkpoint: int = 5000) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """:meth:`list_page` that yields to the event loop every ``checkpoint`` keys.

        A selector that matches little makes the server scan every key (as
        etcd does); on 150,000 pods that is most of a second of Python, which
        must not stall every other request and watch.  Writes made while the
        scan is paused do not leak into the result: it stays the snapshot at
        its resourceVersion.
        """
        scan = self._list_scan(plural, namespace, label_selector, field_selector, limit, continue_token,
                               resource_version, resource_version_match, checkpoint=checkpoint)
        try:
            while True:
                next(scan)
                await asyncio.sleep(0)
        except StopIteration as done:
            return done.value

    def _list_scan(self, plural: str, namespace: str | None, label_selector: str | None,
                   field_selector: str | None, limit: int | None, continue_token: str | None,
                   resource_version: str | None, resource_version_match: str | None, checkpoint: int
                   ) -> Generator[None, None, tuple[dict[str, Any], list[dict[str, Any]]]]:
        info = self.resource(plural)
        labels, fields = self.parse_selectors(plural, label_selector, field_selector)
        _check_rv_match(resource_version_match, resource_version, continue_token)
        ns = namespace if info.namespaced else None
        if limit is not None and limit <= 0:
            limit = None
        start_after = ""
        snapshot_rv = self.resource_version
        if continue_token:
            if resource_version not in (None, ""):
                raise bad_request("specifying resource version is not allowed when using continue")
            snapshot_rv, start_after = self._decode_continue(continue_token, ns)
            if snapshot_rv == -1:
                snapshot_rv = self.resource_version
        elif resource_version not in (None, "", "0"):
            rv = _parse_rv(resource_version)
            if resource_version_match == "Exact":
                # The state at exactly that revision, rebuilt from the history
                # (410 Expired when it is older than what is kept).
                snapshot_rv = rv
            if rv > self.resource_version:
                # A cache not yet at the requested revision; the real server waits
                # up to 3 s first (storage/cacher), this store cannot catch up.
                raise ApiError(504, "Timeout",
                               f"Too large resource version: {rv}, current: {self.resource_version}",
                               details={"causes": [{"reason": "ResourceVersionTooLarge",
                                                    "message": "Too large resource version"}],
                                        "retryAfterSeconds": 1})
        overrides = self._overrides_since(info, snapshot_rv, continue_token)
        seen_rev = self.resource_version
        prefix = (ns + "/") if ns else ""
        keys = self._keys[plural]
        current = self._objects[plural]
        selecting = not labels.empty or not fields.empty
        items: list[dict[str, Any]] = []
        after = start_after  # the last key examined
        more = False
        while True:
            # Merge the live keys with the keys that existed at the snapshot but
            # are gone now, both taken up again after the last key examined.
            i = bisect.bisect_right(keys, after) if after else bisect.bisect_left(keys, prefix)
            extra = sorted(k for k, v in overrides.items()
                           if v is not None and k not in current and k > after and k.startswith(prefix))
            j = 0
            budget = checkpoint or -1
            finished = False
            while budget != 0:
                ki = keys[i] if i < len(keys) else None
                kj = extra[j] if j < len(extra) else None
                if ki is None and kj is None:
                    finished = True
                    break
                if kj is None or (ki is not None and ki < kj):
                    k, i = ki, i + 1
                else:
                    k, j = kj, j + 1
                assert k is not None
                if prefix and not k.startswith(prefix):
                    finished = True
                    break
                if limit and len(items) >= limit:
                    more = True
                    finished = True
                    break
                budget -= 1
                after = k
                obj = overrides[k] if k in overrides else current.get(k)
                if obj is None:
                    continue
                if selecting:
                    if not labels.empty and not labels.matches(obj["metadata"].get("labels")):
                        continue
                    if not fields.empty and not fields.matches(obj):
                        continue
                items.append(_strip_type(obj))
            if finished:
                break
            yield
            seen_rev = self._catch_up(info, overrides, seen_rev)
        meta: dict[str, Any] = {"resourceVersion": str(snapshot_rv)}
        if more and after:
            meta["continue"] = self._encode_continue(snapshot_rv, after, ns)
            if not selecting:
                # ListMeta.remainingItemCount: only when no selector filters the rest.
                meta["remainingItemCount"] = self._count_from(keys, after, prefix, overrides, current)
        return meta, items

    def _catch_up(self, info: ResourceInfo, overrides: dict[str, dict[str, Any] | None], seen_rev: int) -> int:
        """Record the snapshot state of keys written while a scan was paused."""
        if self.resource_version == seen_rev:
            return seen_rev
        oldest = self._history[0].rev
        if oldest > seen_rev + 1:
            raise expired(LIST_EXPIRED)
        for idx in range(seen_rev + 1 - oldest, len(self._history)):
            ch = self._history[idx]
            if ch.plural == info.plural and ch.key not in overrides:
                overrides[ch.key] = ch.prev
        return self.resource_version

    def _count_from(self, keys: list[str], last_key: str, prefix: str,
                    overrides: dict[str, dict[str, Any] | None], current: dict[str, Any]) -> int:
        lo = bisect.bisect_right(keys, last_key)
        hi = bisect.bisect_left(keys, prefix + "\U0010ffff") if prefix else len(keys)
        n = hi - lo
        for k, v in overrides.items():
            if k > last_key and k.startswith(prefix):
                in_current = k in current
                if v is None and in_current:
                    n -= 1
                elif v is not None and not in_current:
                    n += 1
        return n

    def _overrides_since(self, info: ResourceInfo, rv: int,
                         continue_token: str | None) -> dict[str, dict[str, Any] | None]:
        """The state at ``rv`` of the keys changed after it (None: absent at rv)."""
        if rv >= self.resource_version:
            return {}
        oldest = self._history[0].rev if self._history else self.resource_version + 1
        if rv < oldest - 1:
            # Compacted away (etcd3 store.go interpretListError): a continue
            # gets 410 with a token that continues inconsistently at the newest
            # revision (rv -1); an exact list gets the plain "too old".
            if not continue_token:
                raise expired(LIST_EXPIRED)
            _, start = self._decode_continue(continue_token, None)
            raise expired(CONTINUE_EXPIRED, self._raw_token(-1, start))
        out: dict[str, dict[str, Any] | None] = {}
        start = rv + 1 - oldest
        for i in range(start, len(self._history)):
            ch = self._history[i]
            if ch.plural == info.plural and ch.key not in out:
                out[ch.key] = ch.prev
        return out

    # continue tokens: base64(JSON {"v", "rv", "start"}) as storage/continue.go
    @staticmethod
    def _raw_token(rv: int, start: str) -> str:
        raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start}, separators=(",", ":"))
        return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")

    def _encode_continue(self, rv: int, last_key: str, ns: str | None) -> str:
        # "start" is the key after which to resume (the real token stores
        # lastKey + "\x00"; we store lastKey and resume strictly after it).
        return self._raw_token(rv, last_key)

    @staticmethod
    def _decode_continue(token: str, ns: str | None) -> tuple[int, str]:
        try:
            padded = token + "=" * (-len(token) % 4)
            data = json.loads(base64.urlsafe_b64decode(padded.encode()))
            if data.get("v") != "meta.k8s.io/v1":
                raise ValueError("continue key is not valid: incorrect encoded start resourceVersion "
                                 "(version meta.k8s.io/v1)")
            rv, start = int(data["rv"]), str(data["start"])
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            msg = str(e) if str(e).startswith("continue key") else "continue key is not valid: " + str(e)
            raise bad_request(msg) from None
        if rv == 0 or rv < -1:
            raise bad_request("continue key is not valid: incorrect encoded start resourceVersion "
                              "(version meta.k8s.io/v1)")
        if ns and not start.startswith(ns + "/"):
            raise bad_request("continue key is not valid: key does not belong to this list")
        return rv, start

    # -- watch ----------------------------------------------------------------------
    def watch(self, plural: str, namespace: str | None = None, resource_version: str | None = None,
              label_selector: str | None = None, field_selector: str | None = None,
              allow_bookmarks: bool = False, *, copy_objects: bool = True) -> Watcher:
        """Start a watch.  ``resource_version`` None/""/"0": synthetic ADDED for
        the current state first; a revision: every change after it.

        Raises ApiError(410 Expired, "too old resource version: X (Y)") when the
        revision is older than the kept history (watch_cache.go).
        """
        info = self.resource(plural)
        labels, fields = self.parse_selectors(plural, label_selector, field_selector)
        ns = namespace if info.namespaced else None
        w = Watcher(self, info, ns, labels, fields, allow_bookmarks, copy_objects)
        if resource_version in (None, "", "0"):
            prefix = (ns + "/") if ns else ""
            keys = self._keys[plural]
            objects = self._objects[plural]
            for k in _iter_from(keys, bisect.bisect_left(keys, prefix)):
                if prefix and not k.startswith(prefix):
                    break
                obj = objects[k]
                if w.matches(obj):
                    w._queue_initial(obj)
        else:
            rv = _parse_rv(resource_version)
            oldest = self._history[0].rev if self._history else self.resource_version + 1
            if rv < oldest - 1:
                raise expired(f"too old resource version: {rv} ({oldest - 1})")
            if rv < self.resource_version:
                for i in range(rv + 1 - oldest, len(self._history)):
                    ch = self._history[i]
                    if ch.plural == plural:
                        w._offer(ch)
        w.resource_version = self.resource_version
        self._watchers.add(w)
        return w

    def close_watchers(self) -> int:
        """Close every open watcher (in-process and HTTP); returns how many."""
        ws = list(self._watchers)
        for w in ws:
            w.close()
        return len(ws)

    @property
    def oldest_resource_version(self) -> int:
        """The oldest revision a watch can resume from."""
        return (self._history[0].rev - 1) if self._history else self.resource_version

    def count(self, plural: str) -> int:
        return len(self._objects[self.resource(plural).plural])


def _check_rv_match(match: str | None, rv: str | None, continue_token: str | None) -> None:
    """ValidateListOptions (apimachinery apis/meta/internalversion/validation)."""
    if not match:
        return
    if match not in ("Exact", "NotOlderThan"):
        reason, msg = "FieldValueNotSupported", (f'Unsupported value: "{match}": supported values: '
                                                 '"Exact", "NotOlderThan"')
    elif continue_token:
        reason, msg = "FieldValueForbidden", "Forbidden: resourceVersionMatch is forbidden when continue is provided"
    elif rv in (None, ""):
        reason, msg = ("FieldValueForbidden",
                       "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided")
    elif match == "Exact" and rv == "0":
        reason, msg = "FieldValueForbidden", 'Forbidden: resourceVersionMatch "exact" is forbidden for resourceVersion "0"'
    else:
        return
    raise ApiError(422, "Invalid", f'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: {msg}',
                   details={"group": "meta.k8s.io", "kind": "ListOptions",
                            "causes": [{"reason": reason, "message": msg, "field": "resourceVersionMatch"}]})


def _iter_from(keys: list[str], lo: int) -> Iterator[str]:
    for i in range(lo, len(keys)):
        yield keys[i]


def _strip_type(obj: dict[str, Any]) -> dict[str, Any]:
    # Items of a typed list carry no TypeMeta on the wire.
    if "kind" in obj or "apiVersion" in obj:
        return {k: v for k, v in obj.items() if k != "kind" and k != "apiVersion"}
    return obj
