"""Read a cluster file of ordinary Kubernetes manifests: check each object, sort them into the order
the node agent creates them in.  Docs: docs/test-cluster.md."""

from __future__ import annotations

import copy
import json
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import yaml

from .pod_resources import QuantityError, parse_quantity

_Base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when PyYAML has it


class _Loader(_Base):  # type: ignore[valid-type,misc]
    """SafeLoader that keeps timestamps as the strings Kubernetes uses (an
    unquoted ``2025-01-01T00:00:00Z`` would otherwise become a datetime)."""


_Loader.add_constructor("tag:yaml.org,2002:timestamp", yaml.SafeLoader.construct_yaml_str)



@dataclass(frozen=True)
class Kind:
    plural: str
    api_version: str
    namespaced: bool


# what a cluster file may hold: kind -> plural, apiVersion, scope (as the API server serves them)
KINDS: dict[str, Kind] = {k: Kind(p, v, ns) for k, p, v, ns in (
    ("ConfigMap", "configmaps", "v1", True),
    ("Event", "events", "v1", True),
    ("Lease", "leases", "coordination.k8s.io/v1", True),
    ("Namespace", "namespaces", "v1", False),
    ("Node", "nodes", "v1", False),
    ("PersistentVolumeClaim", "persistentvolumeclaims", "v1", True),
    ("PersistentVolume", "persistentvolumes", "v1", False),
    ("Pod", "pods", "v1", True),
    ("Secret", "secrets", "v1", True),
    ("ServiceAccount", "serviceaccounts", "v1", True),
    ("Service", "services", "v1", True),
    ("DeviceClass", "deviceclasses", "resource.k8s.io/v1", False),
    ("ResourceClaim", "resourceclaims", "resource.k8s.io/v1", True),
    ("ResourceClaimTemplate", "resourceclaimtemplates", "resource.k8s.io/v1", True),
    ("ResourceSlice", "resourceslices", "resource.k8s.io/v1", False),
    ("StorageClass", "storageclasses", "storage.k8s.io/v1", False),
)}
PLURALS = {k.plural: (kind, k) for kind, k in KINDS.items()}
_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
_BUILTIN_NAMESPACES = ("default", "kube-node-lease", "kube-public", "kube-system")


class LoadError(ValueError):
    """A manifest the simulated cluster cannot load; the message says where and what to fix."""

    def __init__(self, where: str, field_path: str | None, message: str):
        self.where = where
        self.field = field_path
        self.message_text = message
        super().__init__(f"{where}: {field_path}: {message}" if field_path else f"{where}: {message}")


@dataclass
class Manifests:
    """Validated objects, in the order they must be created; ``where`` names each one's place in the input."""

    namespaces: list[dict] = field(default_factory=list)
    nodes: list[dict] = field(default_factory=list)
    pods: list[dict] = field(default_factory=list)
    others: list[tuple[str, dict]] = field(default_factory=list)  # (plural, object), cluster-scoped first
    where: dict[int, str] = field(default_factory=dict)  # id(object) -> "file: document N (Kind name)"

    def __len__(self) -> int:
        return len(self.namespaces) + len(self.nodes) + len(self.pods) + len(self.others)


def parse_text(text: str, source: str = "<manifests>") -> list[tuple[str, Any]]:
    """Documents of ``text`` as ``(where, object)``; Lists are flattened."""
    stripped = text.lstrip()
    docs: Iterable[Any]
    try:
        if stripped.startswith("{") or stripped.startswith("["):
            loaded = json.loads(text)
            docs = loaded if isinstance(loaded, list) else [loaded]
        else:
            # libyaml's parser when PyYAML has it; a cluster of 100,000s of pods loads much
            # faster from JSON (`kubectl get nodes,pods -A -o json`), which json.loads reads
            docs = list(yaml.load_all(text, Loader=_Loader))
    except (yaml.YAMLError, json.JSONDecodeError) as e:
        raise LoadError(source, None, f"not valid YAML or JSON: {e}") from None
    out: list[tuple[str, Any]] = []
    for i, doc in enumerate(docs, 1):
        if doc is None:
            continue
        where = f"{source}: document {i}"
        if isinstance(doc, dict) and (doc.get("kind") == "List" or str(doc.get("kind", "")).endswith("List")):
            items = doc.get("items")
            if not isinstance(items, list):
                raise LoadError(where, "items", f"a {doc.get('kind')} needs an 'items' list")
            for j, item in enumerate(items):
                out.append((f"{where}, item {j}", item))
        else:
            out.append((where, doc))
    return out


def _name(where: str, obj: dict) -> str:
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise LoadError(where, "metadata.name", "every object needs a metadata.name string")
    return meta["name"]


def _check_quantities(where: str, path: str, value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, dict):
        raise LoadError(where, path, "must be a map of resource name to quantity, e.g. {cpu: '8', memory: 32Gi}")
    for k, v in value.items():
        try:
            parse_quantity(v)
        except QuantityError as e:
            raise LoadError(where, f"{path}.{k}", str(e)) from None


def _check_string_map(where: str, path: str, value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, dict):
        raise LoadError(where, path, "must be a map of strings")
    for k, v in value.items():
        if not isinstance(v, str):
            raise LoadError(where, f"{path}.{k}", f"value {v!r} must be a string: quote it, e.g. '{v}'")


def check_node(where: str, node: dict) -> dict:
    """Validate one Node and fill what a real node always has; returns it."""
    meta = node["metadata"]
    _check_string_map(where, "metadata.labels", meta.get("labels"))
    spec = node.get("spec") or {}
    if not isinstance(spec, dict):
        raise LoadError(where, "spec", "must be a map")
    taints = spec.get("taints") or []
    if not isinstance(taints, list):
        raise LoadError(where, "spec.taints", "must be a list of {key, value, effect}")
    for i, t in enumerate(taints):
        if isinstance(t, dict) and t.get("effect") not in _TAINT_EFFECTS:
            raise LoadError(where, f"spec.taints[{i}].effect",
                            f"{t.get('effect')!r} is not one of {', '.join(_TAINT_EFFECTS)}")
    if "unschedulable" in spec and not isinstance(spec["unschedulable"], bool):
        raise LoadError(where, "spec.unschedulable", "must be true or false")
    status = node.setdefault("status", {})
    if not isinstance(status, dict):
        raise LoadError(where, "status", "must be a map")
    _check_quantities(where, "status.capacity", status.get("capacity"))
    _check_quantities(where, "status.allocatable", status.get("allocatable"))
    if not status.get("allocatable"):
        if not status.get("capacity"):
            raise LoadError(where, "status.allocatable",
                            "a node needs status.allocatable (or capacity) with at least cpu, memory and pods")
        status["allocatable"] = dict(status["capacity"])
    status.setdefault("capacity", dict(status["allocatable"]))
    if "pods" not in status["allocatable"]:
        raise LoadError(where, "status.allocatable.pods", "missing: say how many pods the node takes, e.g. '110'")
    conds = status.get("conditions") or []
    if not isinstance(conds, list):
        raise LoadError(where, "status.conditions", "must be a list of {type, status}")
    for i, c in enumerate(conds):
        if not isinstance(c, dict) or c.get("status") not in ("True", "False", "Unknown"):
            raise LoadError(where, f"status.conditions[{i}].status", "must be 'True', 'False' or 'Unknown'")
    if not any(c.get("type") == "Ready" for c in conds):
        conds.append({"type": "Ready", "status": "True", "reason": "KubeletReady",
                      "message": "kubelet is posting ready status"})
    status["conditions"] = conds
    if not status.get("addresses"):
        # the simulated kubelet serves pods on this machine: the node's InternalIP is loopback
        status["addresses"] = [{"type": "InternalIP", "address": "127.0.0.1"},
                               {"type": "Hostname", "address": meta["name"]}]
    info = status.get("nodeInfo")
    if info is not None and not isinstance(info, dict):
        raise LoadError(where, "status.nodeInfo", "must be a map (kubeletVersion, osImage, ...)")
    status["nodeInfo"] = {**_host_node_info(), **(info or {})}
    return node


def _host_node_info() -> dict[str, str]:
    """What a kubelet reports of its host (``NodeSystemInfo``), for a node the file gives none of:
    this machine's kernel, OS and architecture, the API server's version, the simulated runtime."""
    os_image = "Linux"
    try:
        for line in Path("/etc/os-release").read_text(encoding="utf-8").splitlines():
            if line.startswith("PRETTY_NAME="):
                os_image = line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    machine = platform.machine()
    return {"kubeletVersion": "v1.32.0", "kubeProxyVersion": "", "containerRuntimeVersion": "gpuspawner-sim://1",
            "kernelVersion": platform.release(), "osImage": os_image, "operatingSystem": "linux",
            "architecture": {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine),
            "machineID": "", "systemUUID": "", "bootID": ""}


def _check_container(where: str, path: str, c: Any) -> None:
    if not isinstance(c, dict):
        raise LoadError(where, path, "must be a map with name and image")
    if not c.get("name"):
        raise LoadError(where, f"{path}.name", "every container needs a name")
    res = c.get("resources") or {}
    if not isinstance(res, dict):
        raise LoadError(where, f"{path}.resources", "must be a map with requests/limits")
    _check_quantities(where, f"{path}.resources.requests", res.get("requests"))
    _check_quantities(where, f"{path}.resources.limits", res.get("limits"))
    for key in ("command", "args"):
        if key in c and not isinstance(c[key], list):
            raise LoadError(where, f"{path}.{key}", "must be a list of strings")


def check_pod(where: str, pod: dict) -> dict:
    meta = pod["metadata"]
    _check_string_map(where, "metadata.labels", meta.get("labels"))
    _check_string_map(where, "metadata.annotations", meta.get("annotations"))
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        raise LoadError(where, "spec", "a pod needs a spec with containers")
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        raise LoadError(where, "spec.containers", "a pod needs at least one container")
    for i, c in enumerate(containers):
        _check_container(where, f"spec.containers[{i}]", c)
        if not c.get("image"):
            raise LoadError(where, f"spec.containers[{i}].image", "every container needs an image")
    for i, c in enumerate(spec.get("initContainers") or []):
        _check_container(where, f"spec.initContainers[{i}]", c)
    _check_quantities(where, "spec.overhead", spec.get("overhead"))
    _check_string_map(where, "spec.nodeSelector", spec.get("nodeSelector"))
    status = pod.get("status") or {}
    if not isinstance(status, dict):
        raise LoadError(where, "status", "must be a map")
    if status.get("phase") is not None and status["phase"] not in _PHASES:
        raise LoadError(where, "status.phase", f"{status['phase']!r} is not one of {', '.join(_PHASES)}")
    return pod


def _check_kind(where: str, obj: Any) -> str:
    """The plural of a loadable object; its apiVersion must be the served one."""
    if not isinstance(obj, dict):
        raise LoadError(where, None, f"expected a Kubernetes object (a map), got {type(obj).__name__}")
    kind = obj.get("kind")
    if kind not in KINDS:
        raise LoadError(where, "kind", f"{kind!r} cannot be loaded; supported kinds: {', '.join(sorted(KINDS))}")
    info = KINDS[kind]
    api = obj.get("apiVersion")
    if api not in (None, info.api_version):
        raise LoadError(where, "apiVersion", f"{api!r}: a {kind} is {info.api_version!r}")
    return info.plural


def _check_uid(where: str, obj: dict, uids: dict[str, str]) -> None:
    uid = obj["metadata"].get("uid")
    if uid is None:
        return
    if not isinstance(uid, str) or not uid:
        raise LoadError(where, "metadata.uid", "must be a non-empty string (or left out)")
    if uid in uids:
        raise LoadError(where, "metadata.uid", f"{uid!r} is also the uid of {uids[uid]}: uids must be unique")
    uids[uid] = where


def _check_owners(objects: list[tuple[str, str, dict]]) -> None:
    """An owner reference to an object of the file must carry that object's uid, or the
    garbage collector would delete the dependent as soon as the cluster starts."""
    by_name = {(PLURALS[p][0], (o["metadata"].get("namespace") if PLURALS[p][1].namespaced else None),
                o["metadata"]["name"]): o for _, p, o in objects}
    for where, plural, obj in objects:
        for i, ref in enumerate(obj["metadata"].get("ownerReferences") or []):
            if not isinstance(ref, dict):
                continue
            target = None
            if ref.get("kind") in KINDS:
                ns = obj["metadata"].get("namespace") if KINDS[ref["kind"]].namespaced else None
                target = by_name.get((ref["kind"], ns, ref.get("name")))
            if target is None:
                continue
            uid = target["metadata"].get("uid")
            if uid != ref.get("uid"):
                hint = (f"give the {ref['kind']} metadata.uid {ref.get('uid')!r}" if not uid
                        else f"write uid {uid!r}")
                raise LoadError(where, f"metadata.ownerReferences[{i}].uid",
                                f"{ref.get('uid')!r} is not the uid of {ref['kind']} {ref.get('name')} in this "
                                f"file: {hint}, or the garbage collector deletes this object")


def validate(docs: list[tuple[str, Any]]) -> Manifests:
    """Check each object and sort them into what the store creates, in order."""
    out = Manifests()
    node_names: set[str] = set()
    namespaces_defined: set[str] = set()
    namespaces_used: dict[str, str] = {}
    seen: dict[tuple[str, str | None, str], str] = {}
    uids: dict[str, str] = {}
    objects: list[tuple[str, str, dict]] = []
    cluster_scoped: list[tuple[str, dict]] = []
    for where, obj in docs:
        plural = _check_kind(where, obj)
        kind, info = PLURALS[plural]
        name = _name(where, obj)
        ns = (obj["metadata"].get("namespace") or "default") if info.namespaced else None
        if (plural, ns, name) in seen:
            raise LoadError(where, "metadata.name", f"{kind.lower()} {name!r} is defined twice "
                                                    f"(also {seen[plural, ns, name]})")
        seen[plural, ns, name] = where
        where = f"{where} ({kind} {name})"
        _check_uid(where, obj, uids)
        objects.append((where, plural, obj))
        out.where[id(obj)] = where
        if plural == "nodes":
            out.nodes.append(check_node(where, obj))
            node_names.add(name)
        elif plural == "namespaces":
            namespaces_defined.add(name)
            if name not in _BUILTIN_NAMESPACES:
                out.namespaces.append(obj)
        elif not info.namespaced:
            obj["metadata"].pop("namespace", None)
            cluster_scoped.append((plural, obj))
        else:
            obj["metadata"]["namespace"] = ns
            namespaces_used.setdefault(str(ns), where)
            if plural == "pods":
                out.pods.append(check_pod(where, obj))
            else:
                out.others.append((plural, obj))
    # cluster-scoped kinds first: a claim's StorageClass must exist when the claim is admitted
    out.others = cluster_scoped + out.others
    for pod in out.pods:
        node = pod["spec"].get("nodeName")
        if node and node not in node_names:
            raise LoadError(out.where[id(pod)], "spec.nodeName",
                            f"node {node!r} is not in the file: add the Node or remove the nodeName")
    _check_owners(objects)
    for ns in sorted(namespaces_used):
        if ns not in namespaces_defined and ns not in _BUILTIN_NAMESPACES:
            out.namespaces.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    return out


def load_text(text: str, source: str = "<manifests>") -> Manifests:
    return validate(parse_text(text, source))


def load_file(path: str | Path) -> Manifests:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise LoadError(str(p), None, f"cannot read the cluster file: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise LoadError(str(p), None, f"not UTF-8 text: {e}") from None
    return load_text(text, str(p))


def load_objects(objects: list[dict], source: str = "manifests") -> Manifests:
    """Validate manifests given as dicts (e.g. ``SimCluster(manifests=[...])``)."""
    docs: list[tuple[str, Any]] = []
    for i, doc in enumerate(copy.deepcopy(list(objects)), 1):
        if isinstance(doc, dict) and str(doc.get("kind", "")).endswith("List"):
            for j, item in enumerate(doc.get("items") or []):
                docs.append((f"{source}[{i - 1}], item {j}", item))
        else:
            docs.append((f"{source}[{i - 1}]", doc))
    return validate(docs)


def fill_running(pod: dict, status: dict) -> None:
    """A Running pod written by hand without the status a kubelet keeps: give it
    ready containers and conditions, as ``kubectl get pods -o yaml`` would show."""
    stamp = pod["metadata"].get("creationTimestamp")
    if not status.get("conditions"):
        status["conditions"] = [{"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": stamp}
                                for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady",
                                          "PodScheduled")]
    if not status.get("containerStatuses"):
        status["containerStatuses"] = [
            {"name": c["name"], "image": c.get("image", ""), "imageID": "", "ready": True, "started": True,
             "restartCount": 0, "state": {"running": {"startedAt": stamp}}, "lastState": {}}
            for c in pod["spec"].get("containers") or []]
    status.setdefault("startTime", stamp)
