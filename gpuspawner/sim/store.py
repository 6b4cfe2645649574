"""The simulated cluster's object store: an etcd + registry + watch cache in one.
Design notes: docs/simulated-apiserver.md.
"""

from __future__ import annotations

import asyncio
import base64
import bisect
import collections
import json
import random
import time
import uuid
from typing import Any, Callable, Generator, Iterable, Iterator

from . import deletion, patching, storage_api
from .errors import (CONTINUE_EXPIRED, LIST_EXPIRED, MODIFIED, ApiError, already_exists, bad_request, conflict,
                     expired, invalid, not_found)
from .resources import (DEFAULT_NAMESPACES, GENERATE_NAME_ALPHABET, IMMORTAL_NAMESPACES, MAX_GENERATED_BASE,
                        RESOURCES, ResourceInfo)
from .selectors import (FieldSelector, LabelSelector, SelectorError, parse_field_selector, parse_label_selector,
                        validate_qualified_name)
from .strategy import (clone, default_object, key_of, now_rfc3339_at, parse_rfc3339, parse_rv, validate_object,
                       validate_status_update)
from .watch import Change, Watcher

__all__ = ["ApiError", "Store", "Watcher", "ResourceInfo", "RESOURCES", "DEFAULT_NAMESPACES", "bad_request"]


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
        self._history: collections.deque[Change] = collections.deque(maxlen=history)
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
        return now_rfc3339_at(self._clock)

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
        change = Change(rev, ctype, info.plural, key, stored, prev)
        self._history.append(change)
        for w in list(self._watchers):
            if w.info.plural == info.plural:
                w._offer(change)
            else:
                w.resource_version = rev
        return stored

    def _get_stored(self, info: ResourceInfo, name: str, namespace: str | None) -> tuple[str, dict[str, Any]]:
        key = key_of(namespace, name)
        obj = self._objects[info.plural].get(key)
        if obj is None:
            raise not_found(info.plural, name, info.group)
        return key, obj

    def _admit_create(self, info: ResourceInfo, namespace: str, name: str) -> None:
        """The NamespaceLifecycle admission plugin for a create (subresources included):
        the namespace must exist and must not be terminating
        (``apiserver/pkg/admission/plugin/namespace/lifecycle/admission.go``)."""
        ns = self._objects["namespaces"].get(namespace)
        if ns is None:
            raise not_found("namespaces", namespace)
        if (ns.get("status") or {}).get("phase") != "Terminating":
            return
        resource = f"{info.plural}.{info.group}" if info.group else info.plural  # GroupResource.String()
        what = f'{resource} "{name}"' if name else resource
        raise ApiError(403, "Forbidden",
                       f"{what} is forbidden: unable to create new content in namespace {namespace} "
                       "because it is being terminated",
                       details={"name": name, **({"group": info.group} if info.group else {}), "kind": info.plural,
                                "causes": [{"reason": "NamespaceTerminating",
                                            "message": f"namespace {namespace} is being terminated",
                                            "field": "metadata.namespace"}]})

    # -- verbs --
    def create(self, plural: str, obj: dict[str, Any], namespace: str | None = None, *,
               restore: Iterable[str] = ()) -> dict[str, Any]:
        """Create (POST).  ``restore`` names server-owned metadata the body keeps instead:
        ``uid`` and/or ``creationTimestamp`` (loading a snapshot, as restoring etcd would;
        never reachable over HTTP)."""
        keep = set(restore)
        if keep - {"uid", "creationTimestamp"}:
            raise ValueError(f"only uid and creationTimestamp can be restored, not {sorted(keep)}")
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
            self._admit_create(info, namespace, str(meta.get("name") or ""))
        else:
            meta.pop("namespace", None)
        for server_owned in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp",
                             "deletionGracePeriodSeconds", "generation", "selfLink", "managedFields"):
            if server_owned not in keep or not meta.get(server_owned):
                meta.pop(server_owned, None)
        generated = not meta.get("name") and bool(meta.get("generateName"))
        if generated:
            meta["name"] = self._generate_name(info, namespace, str(meta["generateName"]))
        validate_object(plural, obj, on_create=True)
        key = key_of(namespace, meta["name"])
        if key in self._objects[plural]:
            raise already_exists(plural, meta["name"], info.group)
        if "uid" not in meta:
            meta["uid"] = str(uuid.UUID(int=self._rng.getrandbits(128), version=4))
        if "creationTimestamp" not in meta:
            meta["creationTimestamp"] = self.now()
        obj["kind"], obj["apiVersion"] = info.kind, info.api_version
        default_object(plural, obj, self._next_cluster_ip)
        storage_api.admit(plural, obj, self._objects["storageclasses"].values())
        stored = self._commit("ADDED", info, key, obj, None)
        if plural == "namespaces":
            # The serviceaccounts controller creates "default" in every new
            # namespace (moments later in a real cluster; here at once).
            self.create("serviceaccounts", {"metadata": {"name": "default"}}, meta["name"])
        return clone(stored)

    def _generate_name(self, info: ResourceInfo, namespace: str | None, base: str) -> str:
        base = base[:MAX_GENERATED_BASE]
        # Retried on collision, as the registry does since RetryGenerateName (1.31).
        for _ in range(8):
            name = base + "".join(self._rng.choice(GENERATE_NAME_ALPHABET) for _ in range(5))
            if key_of(namespace, name) not in self._objects[info.plural]:
                return name
        return name

    @staticmethod
    def _check_type(info: ResourceInfo, obj: dict[str, Any]) -> None:
        kind, api_version = obj.get("kind"), obj.get("apiVersion")
        if api_version not in (None, "", info.api_version):
            raise bad_request(
                f"the API version in the data ({api_version}) does not match the expected API version "
                f"({info.api_version})"
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
            raise conflict(info.plural, name, MODIFIED, info.group)
        if subresource == "status":
            # Status updates change status only (ResetObjectMetaForStatus + strategy).
            merged = dict(old)
            if "status" in new:
                merged["status"] = new["status"]
                if info.plural == "persistentvolumes":
                    _stamp_phase_transition(merged, old, self.now())
            new = merged
            new["metadata"] = dict(old["metadata"])
            validate_status_update(info.plural, new, old)
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
            if info.plural == "namespaces":
                # namespace strategy PrepareForUpdate: spec.finalizers change only through /finalize
                spec = dict(new.get("spec") or {})
                if (old.get("spec") or {}).get("finalizers"):
                    spec["finalizers"] = old["spec"]["finalizers"]
                else:
                    spec.pop("finalizers", None)
                new["spec"] = spec
            new["kind"], new["apiVersion"] = info.kind, info.api_version
            validate_object(info.plural, new, on_create=False, old=old)
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        if new == old:
            # etcd3 GuaranteedUpdate: identical bytes are not written, no new revision.
            return old
        if _should_delete_during_update(info, new, old):
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
               preconditions: dict[str, Any] | None = None, propagation_policy: str | None = None,
               orphan_dependents: bool | None = None,
               options: deletion.DeleteOptions | None = None) -> dict[str, Any]:
        """Delete; returns the object (kinds with ReturnDeletedObject, or one still being deleted)
        or a Success Status.

        ``options`` (a parsed DeleteOptions) replaces the keyword arguments when given.
        Graceful deletion (pods), the ``orphan``/``foregroundDeletion`` finalizers of the
        propagation policy and pending finalizers follow the registry's ``Store.Delete``.
        """
        opts = options or deletion.DeleteOptions(grace_period_seconds, preconditions, orphan_dependents,
                                                 propagation_policy)
        opts.validate()
        info = self.resource(plural)
        ns = self._scope(info, namespace, required=True)
        if plural == "namespaces" and name in IMMORTAL_NAMESPACES:
            # The NamespaceLifecycle admission plugin.
            raise ApiError(403, "Forbidden", f'namespaces "{name}" is forbidden: this namespace may not be deleted',
                           details={"name": name, "kind": "namespaces"})
        key, old = self._get_stored(info, name, ns)
        self._check_preconditions(info, name, old, opts.preconditions)
        if plural == "namespaces":
            result = self._delete_namespace(info, key, old, opts)
        else:
            result = self._delete_object(info, key, old, opts)
        return self._delete_response(info, name, result)

    def _check_preconditions(self, info: ResourceInfo, name: str, old: dict[str, Any],
                             pre: Any) -> None:
        if not pre:
            return
        meta = old["metadata"]
        if pre.get("uid") and pre["uid"] != meta.get("uid"):
            raise conflict(info.plural, name,
                           f"Precondition failed: UID in precondition: {pre['uid']}, "
                           f"UID in object meta: {meta.get('uid')}", info.group)
        if pre.get("resourceVersion") and str(pre["resourceVersion"]) != meta.get("resourceVersion"):
            raise conflict(info.plural, name,
                           f"Precondition failed: ResourceVersion in precondition: {pre['resourceVersion']}, "
                           f"ResourceVersion in object meta: {meta.get('resourceVersion')}", info.group)

    def _delete_response(self, info: ResourceInfo, name: str, obj: dict[str, Any]) -> dict[str, Any]:
        if info.returns_deleted_object or obj["metadata"].get("deletionTimestamp"):
            return clone(obj)
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {"name": name, **({"group": info.group} if info.group else {}), "kind": info.plural,
                        "uid": obj["metadata"].get("uid")},
        }

    def _before_delete(self, info: ResourceInfo, old: dict[str, Any],
                       grace: int | None) -> tuple[bool, bool, dict[str, Any] | None]:
        """``rest.BeforeDelete``: (graceful, pending graceful, metadata with the deletion stamped).

        Only pods delete gracefully (pod strategy ``CheckGracefulDelete``): their own
        ``terminationGracePeriodSeconds`` by default, 0 when unscheduled or terminated.
        An object already being deleted may only have its grace period shortened.
        """
        meta, spec, status = old["metadata"], old.get("spec") or {}, old.get("status") or {}
        if grace is not None and grace < 0:
            grace = 1  # negative means "as soon as possible"
        if meta.get("deletionTimestamp"):
            current = meta.get("deletionGracePeriodSeconds")
            if not current:
                return False, False, None
            if grace is None or grace >= current:
                return False, True, None
            started = parse_rfc3339(meta["deletionTimestamp"]) - current
            stamp = now_rfc3339_at(lambda: started + grace)
            return True, False, dict(meta, deletionTimestamp=stamp, deletionGracePeriodSeconds=grace)
        if info.plural != "pods":
            return False, False, None
        period = grace if grace is not None else int(spec.get("terminationGracePeriodSeconds") or 0)
        if not spec.get("nodeName") or status.get("phase") in ("Succeeded", "Failed"):
            period = 0
        stamp = now_rfc3339_at(lambda: self._clock() + period)
        return True, False, dict(meta, deletionTimestamp=stamp, deletionGracePeriodSeconds=period)

    def _delete_object(self, info: ResourceInfo, key: str, old: dict[str, Any],
                       opts: deletion.DeleteOptions) -> dict[str, Any]:
        """The registry's ``Store.Delete`` + ``updateForGracefulDeletionAndFinalizers``."""
        graceful, pending_graceful, stamped = self._before_delete(info, old, opts.grace_period_seconds)
        if pending_graceful:
            # finalizers cannot be changed by DeleteOptions once a graceful deletion is pending
            return old
        finalizers = list(old["metadata"].get("finalizers") or [])
        changed = deletion.gc_finalizers(finalizers, opts)
        if not (graceful or finalizers or changed is not None):
            return self._commit("DELETED", info, key, None, old)
        meta = dict(stamped or old["metadata"])
        pending = changed if changed is not None else finalizers
        if pending:
            meta["finalizers"] = pending
        else:
            meta.pop("finalizers", None)
        if not graceful:
            if not pending:
                return self._commit("DELETED", info, key, None, old)
            # markAsDeleting: deletionTimestamp now (or earlier), grace 0
            now = self.now()
            if not meta.get("deletionTimestamp") or meta["deletionTimestamp"] > now:
                meta["deletionTimestamp"] = now
            meta["deletionGracePeriodSeconds"] = 0
            return self._write(info, key, dict(old, metadata=meta), old)
        stored = self._write(info, key, dict(old, metadata=meta), old)
        if pending or meta.get("deletionGracePeriodSeconds"):
            return stored
        return self._commit("DELETED", info, key, None, stored)

    def _write(self, info: ResourceInfo, key: str, new: dict[str, Any], old: dict[str, Any]) -> dict[str, Any]:
        """A MODIFIED revision, unless nothing changed (GuaranteedUpdate writes no identical bytes)."""
        if new == old:
            return old
        return self._commit("MODIFIED", info, key, new, old)

    def _delete_namespace(self, info: ResourceInfo, key: str, old: dict[str, Any],
                          opts: deletion.DeleteOptions) -> dict[str, Any]:
        """``pkg/registry/core/namespace/storage/storage.go`` Delete.

        The first delete sets ``deletionTimestamp`` and phase Terminating (and the
        garbage collector's finalizers the options ask for); the namespace controller
        then empties it, removes ``kubernetes`` from ``spec.finalizers`` and deletes it
        again, which removes it.  While ``spec.finalizers`` is not empty a delete
        returns the namespace unchanged.
        """
        meta = old["metadata"]
        if not meta.get("deletionTimestamp"):
            new_meta = dict(meta, deletionTimestamp=self.now())
            finalizers = deletion.namespace_gc_finalizers(list(meta.get("finalizers") or []), opts)
            if finalizers is not None:
                if finalizers:
                    new_meta["finalizers"] = finalizers
                else:
                    new_meta.pop("finalizers", None)
            status = dict(old.get("status") or {}, phase="Terminating")
            return self._commit("MODIFIED", info, key, dict(old, metadata=new_meta, status=status), old)
        if (old.get("spec") or {}).get("finalizers"):
            return old
        return self._delete_object(info, key, old, opts)

    def finalize_namespace(self, name: str, obj: dict[str, Any]) -> dict[str, Any]:
        """``PUT namespaces/{name}/finalize``: only ``spec.finalizers`` changes (FinalizeStrategy).

        When that leaves no finalizer of either kind on a namespace being deleted, the
        update removes it (``ShouldDeleteNamespaceDuringUpdate``).
        """
        info = RESOURCES["namespaces"]
        if not isinstance(obj, dict):
            raise bad_request("the body of the request must be a Namespace object")
        self._check_type(info, obj)
        key, old = self._get_stored(info, name, None)
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        if meta.get("name") not in (None, "", name):
            raise bad_request(f"the name of the object ({meta.get('name')}) does not match the name on the URL "
                              f"({name})")
        want_rv = meta.get("resourceVersion")
        if want_rv not in (None, "") and str(want_rv) != old["metadata"]["resourceVersion"]:
            raise conflict("namespaces", name, MODIFIED)
        finalizers = list((obj.get("spec") or {}).get("finalizers") or [])
        causes = [("FieldValueInvalid", f"spec.finalizers[{i}]", f"Invalid value: {json.dumps(f)}: {m}")
                  for i, f in enumerate(finalizers) for m in validate_qualified_name(str(f))]
        if causes:
            raise invalid("Namespace", name, causes)
        spec = dict(old.get("spec") or {})
        if finalizers:
            spec["finalizers"] = finalizers
        else:
            spec.pop("finalizers", None)
        new = dict(old, spec=spec)
        if new == old:
            return clone(old)
        return clone(self._commit("MODIFIED", info, key, new, old))

    def evict(self, name: str, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        """``POST pods/{name}/eviction`` (``pkg/registry/core/pod/storage/eviction.go``).

        No PodDisruptionBudgets are served, so an eviction is the delete its
        ``deleteOptions`` describe; the answer is a Success Status.
        """
        if not isinstance(body, dict):
            raise bad_request("the body of the request must be an Eviction object")
        if (body.get("metadata") or {}).get("name") != name:
            raise bad_request("name in URL does not match name in Eviction object")
        self._admit_create(RESOURCES["pods"], namespace, name)
        opts = deletion.from_body(body.get("deleteOptions") or {})
        self.delete("pods", name, namespace, options=opts)
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    def finalize_delete(self, plural: str, name: str, namespace: str | None = None) -> None:
        """The kubelet's last step: ``DELETE`` at grace 0 with the pod's uid as precondition.

        A pod whose finalizers remain stays (grace 0) until an update removes the last one.
        """
        info = self.resource(plural)
        ns = self._scope(info, namespace, required=True)
        _, old = self._get_stored(info, name, ns)
        self.delete(plural, name, ns, 0, preconditions={"uid": old["metadata"].get("uid")})

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
        self._admit_create(info, ns, name)
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
        return {"kind": info.list_kind, "apiVersion": info.api_version, "metadata": meta,
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
            rv = parse_rv(resource_version)
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
              allow_bookmarks: bool = False, *, copy_objects: bool = True,
              send_initial_events: bool = False) -> Watcher:
        """Start a watch.  ``resource_version`` None/""/"0": synthetic ADDED for
        the current state first; a revision: every change after it.  ``send_initial_events``
        (``sendInitialEvents=true``, a watch-list): the current state, then a BOOKMARK annotated
        ``k8s.io/initial-events-end: "true"`` (the cacher's end of the initial events).

        Raises ApiError(410 Expired, "too old resource version: X (Y)") when the
        revision is older than the kept history (watch_cache.go).
        """
        info = self.resource(plural)
        labels, fields = self.parse_selectors(plural, label_selector, field_selector)
        ns = namespace if info.namespaced else None
        w = Watcher(self, info, ns, labels, fields, allow_bookmarks, copy_objects)
        if send_initial_events or resource_version in (None, "", "0"):
            prefix = (ns + "/") if ns else ""
            keys = self._keys[plural]
            objects = self._objects[plural]
            for k in _iter_from(keys, bisect.bisect_left(keys, prefix)):
                if prefix and not k.startswith(prefix):
                    break
                obj = objects[k]
                if w.matches(obj):
                    w._queue_initial(obj)
            if send_initial_events:
                w._pending.append(("BOOKMARK", {
                    "kind": info.kind, "apiVersion": info.api_version,
                    "metadata": {"resourceVersion": str(self.resource_version),
                                 "annotations": {"k8s.io/initial-events-end": "true"}},
                }))
        else:
            rv = parse_rv(resource_version)
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


def _stamp_phase_transition(new: dict[str, Any], old: dict[str, Any], now: str) -> None:
    """PV status strategy (PersistentVolumeLastPhaseTransitionTime, GA 1.31): a phase change
    stamps ``status.lastPhaseTransitionTime``."""
    status = new.get("status")
    if isinstance(status, dict) and status.get("phase") != (old.get("status") or {}).get("phase"):
        new["status"] = dict(status, lastPhaseTransitionTime=now)


def _should_delete_during_update(info: ResourceInfo, new: dict[str, Any], old: dict[str, Any]) -> bool:
    """registry ``ShouldDeleteDuringUpdate``: this update removed the last finalizer of an object
    marked for deletion with grace 0; a namespace also needs an empty ``spec.finalizers``
    (``ShouldDeleteNamespaceDuringUpdate``)."""
    m = new["metadata"]
    if m.get("finalizers") or not old["metadata"].get("finalizers"):
        return False
    if info.plural == "namespaces" and (new.get("spec") or {}).get("finalizers"):
        return False
    return bool(m.get("deletionTimestamp")) and m.get("deletionGracePeriodSeconds") == 0


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

