"""Kubernetes objects for the simulated cluster's controller tests (storage, garbage collection,
namespaces): plain JSON dicts, as they travel over the wire."""

from __future__ import annotations

from typing import Any

ZONE = "topology.kubernetes.io/zone"
PROVISIONER = "sim.gpuspawner.dev/hostpath"


def node(name: str, *, zone: str | None = None, gpus: int = 0, taints: list[dict] | None = None,
         labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A Ready node with 8 cpu, 32Gi, 110 pods and ``gpus`` nvidia.com/gpu."""
    alloc = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    if gpus:
        alloc["nvidia.com/gpu"] = str(gpus)
    all_labels = {"kubernetes.io/hostname": name, **({ZONE: zone} if zone else {}), **(labels or {})}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": all_labels},
            "spec": {"taints": list(taints or [])}, "status": {"allocatable": alloc}}


def pod(name: str, *, namespace: str | None = None, node_name: str | None = None, gpus: int = 0,
        claims: tuple[str, ...] = (), tolerations: list[dict] | None = None, grace: int | None = None,
        finalizers: list[str] | None = None, owners: list[dict] | None = None) -> dict[str, Any]:
    """A one-container pod; ``claims`` become persistentVolumeClaim volumes."""
    container: dict[str, Any] = {"name": "main", "image": "python:3.11", "ports": [{"containerPort": 8888}]}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    spec: dict[str, Any] = {"containers": [container]}
    if node_name:
        spec["nodeName"] = node_name
    if claims:
        spec["volumes"] = [{"name": c, "persistentVolumeClaim": {"claimName": c}} for c in claims]
    if tolerations is not None:
        spec["tolerations"] = tolerations
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    if finalizers:
        meta["finalizers"] = finalizers
    if owners:
        meta["ownerReferences"] = owners
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def owner_ref(obj: dict[str, Any], *, block: bool | None = None, controller: bool | None = None) -> dict[str, Any]:
    """An ownerReference to a stored object (its kind, name and uid)."""
    ref = {"apiVersion": obj.get("apiVersion", "v1"), "kind": obj["kind"], "name": obj["metadata"]["name"],
           "uid": obj["metadata"]["uid"]}
    if block is not None:
        ref["blockOwnerDeletion"] = block
    if controller is not None:
        ref["controller"] = controller
    return ref


def storage_class(name: str, *, mode: str = "WaitForFirstConsumer", default: bool = False,
                  provisioner: str = PROVISIONER, zones: list[str] | None = None,
                  reclaim: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if default:
        meta["annotations"] = {"storageclass.kubernetes.io/is-default-class": "true"}
    sc: dict[str, Any] = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": meta,
                          "provisioner": provisioner, "volumeBindingMode": mode}
    if zones:
        sc["allowedTopologies"] = [{"matchLabelExpressions": [{"key": ZONE, "values": zones}]}]
    if reclaim:
        sc["reclaimPolicy"] = reclaim
    return sc


def claim(name: str, *, namespace: str | None = None, size: str = "1Gi", storage_class_name: str | None = None,
          volume_name: str | None = None, modes: tuple[str, ...] = ("ReadWriteOnce",)) -> dict[str, Any]:
    spec: dict[str, Any] = {"accessModes": list(modes), "resources": {"requests": {"storage": size}}}
    if storage_class_name is not None:
        spec["storageClassName"] = storage_class_name
    if volume_name:
        spec["volumeName"] = volume_name
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": spec}


def volume(name: str, *, size: str = "10Gi", storage_class_name: str = "", zone: str | None = None,
           claim_ref: tuple[str, str] | None = None, modes: tuple[str, ...] = ("ReadWriteOnce",),
           labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A hostPath PersistentVolume, pinned to ``zone`` by node affinity when given."""
    spec: dict[str, Any] = {"capacity": {"storage": size}, "accessModes": list(modes),
                            "storageClassName": storage_class_name,
                            "hostPath": {"path": f"/tmp/{name}", "type": "DirectoryOrCreate"}}
    if zone:
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": ZONE, "operator": "In", "values": [zone]}]}]}}
    if claim_ref:
        spec["claimRef"] = {"namespace": claim_ref[0], "name": claim_ref[1]}
    meta: dict[str, Any] = {"name": name}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": meta, "spec": spec}
