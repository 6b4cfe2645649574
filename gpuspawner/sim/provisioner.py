"""A simulated dynamic provisioner, behaving as kubernetes-csi/external-provisioner does.
Design notes: docs/simulated-cluster.md.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import socket
import tempfile
import uuid
from pathlib import Path
from typing import Any

from . import storage_api
from testcluster.node.controller import MERGE, EventRecorder, Tasks, get_or_none, informer, worker
from testcluster.node.work_queue import WorkQueue

__all__ = ["HostPathProvisioner", "PROVISIONER"]

log = logging.getLogger(__name__)

PROVISIONER = "sim.gpuspawner.dev/hostpath"
ZONE = "topology.kubernetes.io/zone"


class HostPathProvisioner:
    """Creates and deletes PersistentVolumes for claims of its StorageClasses."""

    def __init__(self, store, *, name: str = PROVISIONER, root: str | Path | None = None) -> None:
        self.store = store
        self.name = name
        self._own_root = root is None
        self.root = Path(root) if root is not None else Path(tempfile.mkdtemp(prefix="gpuspawner-sim-volumes-"))
        self.recorder = EventRecorder(store, f"{name}_{socket.gethostname()}_{uuid.uuid4()}")
        self.claims: WorkQueue[tuple[str, str]] = WorkQueue()
        self.volumes: WorkQueue[str] = WorkQueue()
        self._stopping = asyncio.Event()
        self._tasks = Tasks()

    async def start(self) -> None:
        synced = [asyncio.Event(), asyncio.Event()]
        self._tasks.start(informer(self.store, "persistentvolumeclaims",
                                   lambda items: [self._claim_event("ADDED", c) for c in items],
                                   self._claim_event, self._stopping, synced[0]), "provisioner-claims")
        self._tasks.start(informer(self.store, "persistentvolumes",
                                   lambda items: [self.volumes.add(v["metadata"]["name"]) for v in items],
                                   lambda kind, pv: kind != "DELETED" and self.volumes.add(pv["metadata"]["name"]),
                                   self._stopping, synced[1]), "provisioner-volumes")
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in synced)), 60)
        label = f"provisioner {self.name}"
        self._tasks.start(worker(self.claims, lambda k: self.sync_claim(*k), self._stopping, label, log),
                          "provisioner-claim-worker")
        self._tasks.start(worker(self.volumes, self.sync_volume, self._stopping, label, log),
                          "provisioner-volume-worker")

    async def stop(self) -> None:
        self._stopping.set()
        self.claims.close()
        self.volumes.close()
        await self._tasks.stop()
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def _claim_event(self, kind: str, pvc: dict) -> None:
        if kind != "DELETED":
            self.claims.add((pvc["metadata"].get("namespace") or "default", pvc["metadata"]["name"]))

    def _get(self, plural: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        return get_or_none(self.store, plural, name, namespace)

    # -- provisioning --
    def _should_provision(self, pvc: dict) -> dict | None:
        """``shouldProvision``: the claim's class, when this provisioner is to provision it now."""
        meta, spec = pvc["metadata"], pvc.get("spec") or {}
        ann = meta.get("annotations") or {}
        if spec.get("volumeName") or meta.get("deletionTimestamp"):
            return None
        if (ann.get(storage_api.ANN_STORAGE_PROVISIONER) or ann.get(storage_api.ANN_BETA_STORAGE_PROVISIONER)) != self.name:
            return None
        cls = self._get("storageclasses", storage_api.claim_class(pvc)) if storage_api.claim_class(pvc) else None
        if cls is None or cls.get("provisioner") != self.name:
            return None
        if cls.get("volumeBindingMode") == "WaitForFirstConsumer" and storage_api.ANN_SELECTED_NODE not in ann:
            return None
        if self._get("persistentvolumes", f"pvc-{meta['uid']}") is not None:
            return None  # provisioned already; the PV controller binds it
        return cls

    def sync_claim(self, namespace: str, name: str) -> None:
        pvc = self._get("persistentvolumeclaims", name, namespace)
        cls = self._should_provision(pvc) if pvc is not None else None
        if pvc is None or cls is None:
            return
        self.recorder.emit(pvc, "Normal", "Provisioning",
                           f'External provisioner is provisioning volume for claim "{namespace}/{name}"')
        zone, error = self._zone(pvc, cls)
        if error is not None:
            self.recorder.emit(pvc, "Warning", "ProvisioningFailed",
                               f'failed to provision volume with StorageClass "{cls["metadata"]["name"]}": {error}')
            # rescheduling: the scheduler picks a node again once the annotation is gone
            self.store.patch("persistentvolumeclaims", name,
                             {"metadata": {"annotations": {storage_api.ANN_SELECTED_NODE: None}}}, MERGE, namespace)
            return
        pv = self._volume(pvc, cls, zone)
        (self.root / pv["metadata"]["name"]).mkdir(parents=True, exist_ok=True)
        self.store.create("persistentvolumes", pv)
        self.recorder.emit(pvc, "Normal", "ProvisioningSucceeded",
                           f"Successfully provisioned volume {pv['metadata']['name']}")

    def _zone(self, pvc: dict, cls: dict) -> tuple[str | None, str | None]:
        """The zone to create the volume in, or an error."""
        selected = ((pvc["metadata"].get("annotations") or {}).get(storage_api.ANN_SELECTED_NODE))
        if selected is not None:
            node = self._get("nodes", selected)
            if node is None:
                return None, f'failed to get target node: nodes "{selected}" not found'
            return ((node["metadata"].get("labels") or {}).get(ZONE)), None
        zones = sorted({(n["metadata"].get("labels") or {}).get(ZONE) for n in self.store.list_page("nodes")[1]}
                       - {None})
        allowed = [z for z in zones if _allowed(cls.get("allowedTopologies"), z)]
        if cls.get("allowedTopologies") and not allowed:
            return None, "no topology key found on any node that is allowed by the StorageClass"
        return (allowed[0] if allowed else None), None

    def _volume(self, pvc: dict, cls: dict, zone: str | None) -> dict[str, Any]:
        meta, spec = pvc["metadata"], pvc.get("spec") or {}
        name = f"pvc-{meta['uid']}"
        pv_spec: dict[str, Any] = {
            "capacity": {"storage": ((spec.get("resources") or {}).get("requests") or {}).get("storage", "0")},
            "accessModes": list(spec.get("accessModes") or []),
            "persistentVolumeReclaimPolicy": cls.get("reclaimPolicy") or "Delete",
            "storageClassName": cls["metadata"]["name"],
            "volumeMode": spec.get("volumeMode") or "Filesystem",
            "claimRef": {"kind": "PersistentVolumeClaim", "namespace": meta["namespace"], "name": meta["name"],
                         "uid": meta["uid"], "apiVersion": "v1", "resourceVersion": meta["resourceVersion"]},
            "hostPath": {"path": str(self.root / name), "type": "DirectoryOrCreate"},
        }
        if cls.get("mountOptions"):
            pv_spec["mountOptions"] = list(cls["mountOptions"])
        if zone is not None:
            pv_spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": ZONE, "operator": "In", "values": [zone]}]}]}}
        return {"apiVersion": "v1", "kind": "PersistentVolume",
                "metadata": {"name": name, "annotations": {storage_api.ANN_PROVISIONED_BY: self.name}}, "spec": pv_spec}

    # -- deleting --
    def sync_volume(self, name: str) -> None:
        """``deleteVolumeOperation``: a Released volume of this provisioner with the Delete policy goes."""
        pv = self._get("persistentvolumes", name)
        if pv is None or (pv.get("status") or {}).get("phase") != "Released":
            return
        if (pv["metadata"].get("annotations") or {}).get(storage_api.ANN_PROVISIONED_BY) != self.name:
            return
        if (pv.get("spec") or {}).get("persistentVolumeReclaimPolicy") != "Delete":
            return
        if pv["metadata"].get("deletionTimestamp"):
            return
        path = Path(((pv.get("spec") or {}).get("hostPath") or {}).get("path") or "")
        if path.parent == self.root:
            shutil.rmtree(path, ignore_errors=True)
        self.store.delete("persistentvolumes", name, preconditions={"uid": pv["metadata"]["uid"]})


def _allowed(terms: Any, zone: str) -> bool:
    if not terms:
        return True
    for term in terms:
        exprs = term.get("matchLabelExpressions") or []
        if all(e.get("key") != ZONE or zone in (e.get("values") or []) for e in exprs):
            return True
    return False
