"""The simulated PersistentVolume controller: binds claims to volumes.
Design notes: docs/simulated-cluster.md.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from . import storage_api
from testcluster.node.controller import MERGE, EventRecorder, Tasks, get_or_none, informer, worker
from testcluster.node.work_queue import WorkQueue

__all__ = ["PersistentVolumeController"]

log = logging.getLogger(__name__)

COMPONENT = "persistentvolume-controller"


class PersistentVolumeController:
    """Binds PersistentVolumeClaims to PersistentVolumes and asks provisioners for new ones."""

    def __init__(self, store, *, resync: float = 15.0) -> None:
        self.store = store
        self.resync = resync
        self.recorder = EventRecorder(store, COMPONENT)
        self.claims: WorkQueue[tuple[str, str]] = WorkQueue()
        self.volumes: WorkQueue[str] = WorkQueue()
        self._stopping = asyncio.Event()
        self._tasks = Tasks()

    # -- lifecycle --
    async def start(self) -> None:
        synced = [asyncio.Event() for _ in range(3)]
        self._tasks.start(informer(self.store, "persistentvolumeclaims", self._claims_listed, self._claim_event,
                                   self._stopping, synced[0]), "pv-controller-claims")
        self._tasks.start(informer(self.store, "persistentvolumes", self._volumes_listed, self._volume_event,
                                   self._stopping, synced[1]), "pv-controller-volumes")
        self._tasks.start(informer(self.store, "storageclasses", lambda items: None,
                                   lambda kind, sc: self._requeue_all(), self._stopping, synced[2]),
                          "pv-controller-classes")
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in synced)), 60)
        label = "persistentvolume controller"
        self._tasks.start(worker(self.claims, lambda k: self.sync_claim(*k), self._stopping, label, log),
                          "pv-controller-claim-worker")
        self._tasks.start(worker(self.volumes, self.sync_volume, self._stopping, label, log),
                          "pv-controller-volume-worker")
        self._tasks.start(self._resync(), "pv-controller-resync")

    async def stop(self) -> None:
        self._stopping.set()
        self.claims.close()
        self.volumes.close()
        await self._tasks.stop()

    def _claims_listed(self, items: list[dict]) -> None:
        for c in items:
            self._claim_event("ADDED", c)

    def _claim_event(self, kind: str, pvc: dict) -> None:
        meta = pvc["metadata"]
        if kind == "DELETED":
            # the volume bound to it is Released now
            if (pvc.get("spec") or {}).get("volumeName"):
                self.volumes.add(pvc["spec"]["volumeName"])
            return
        self.claims.add((meta.get("namespace") or "default", meta["name"]))

    def _volumes_listed(self, items: list[dict]) -> None:
        for v in items:
            self.volumes.add(v["metadata"]["name"])

    def _volume_event(self, kind: str, pv: dict) -> None:
        ref = (pv.get("spec") or {}).get("claimRef") or {}
        if kind != "DELETED":
            self.volumes.add(pv["metadata"]["name"])
        if ref.get("name"):
            self.claims.add((ref.get("namespace") or "default", ref["name"]))

    def _requeue_all(self) -> None:
        for pvc in self.store.list_page("persistentvolumeclaims")[1]:
            self._claim_event("MODIFIED", pvc)
        for pv in self.store.list_page("persistentvolumes")[1]:
            self.volumes.add(pv["metadata"]["name"])

    async def _resync(self) -> None:
        while not self._stopping.is_set():
            await asyncio.sleep(self.resync)
            self._requeue_all()

    # -- reads --
    def _get(self, plural: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        return get_or_none(self.store, plural, name, namespace)

    def _class(self, pvc: dict) -> dict | None:
        name = storage_api.claim_class(pvc)
        return self._get("storageclasses", name) if name else None

    # -- claims --
    def sync_claim(self, namespace: str, name: str) -> None:
        pvc = self._get("persistentvolumeclaims", name, namespace)
        if pvc is None:
            return
        if storage_api.ANN_BIND_COMPLETED in (pvc["metadata"].get("annotations") or {}):
            self._sync_bound_claim(pvc)
        else:
            self._sync_unbound_claim(pvc)

    def _sync_unbound_claim(self, pvc: dict) -> None:
        spec = pvc.get("spec") or {}
        if spec.get("volumeName"):
            self._sync_prebound_claim(pvc)
            return
        cls = self._class(pvc)
        delay = bool(cls) and cls.get("volumeBindingMode") == "WaitForFirstConsumer"
        volume = storage_api.find_matching_volume(pvc, self.store.list_page("persistentvolumes")[1], None, delay)
        if volume is not None:
            self._bind(volume, pvc)
            return
        if self._assign_default_class(pvc):
            return
        annotations = pvc["metadata"].get("annotations") or {}
        if delay and storage_api.ANN_SELECTED_NODE not in annotations:
            self._wait_for_consumer(pvc)
        elif storage_api.claim_class(pvc):
            self._provision(pvc, cls)
            return
        else:
            self.recorder.emit(pvc, "Normal", "FailedBinding",
                               "no persistent volumes available for this claim and no storage class is set")
        self._claim_status(pvc, "Pending", None)

    def _sync_prebound_claim(self, pvc: dict) -> None:
        """The user asked for a volume by name (``spec.volumeName``)."""
        volume = self._get("persistentvolumes", pvc["spec"]["volumeName"])
        if volume is None:
            self._claim_status(pvc, "Pending", None)
            return
        if not (volume.get("spec") or {}).get("claimRef") or storage_api.is_volume_bound_to_claim(volume, pvc):
            self._bind(volume, pvc)
        else:
            self._claim_status(pvc, "Pending", None)  # claimed by someone else: retry later

    def _sync_bound_claim(self, pvc: dict) -> None:
        name = (pvc.get("spec") or {}).get("volumeName")
        if not name:
            self._lose(pvc, "ClaimLost",
                       "Bound claim has lost reference to PersistentVolume. Data on the volume is lost!")
            return
        volume = self._get("persistentvolumes", name)
        if volume is None:
            self._lose(pvc, "ClaimLost", "Bound claim has lost its PersistentVolume. Data on the volume is lost!")
        elif not (volume.get("spec") or {}).get("claimRef") or \
                (volume["spec"]["claimRef"].get("uid") == pvc["metadata"]["uid"]):
            self._bind(volume, pvc)
        else:
            self._lose(pvc, "ClaimMisbound", "Two claims are bound to the same volume, this one is bound incorrectly")

    def _lose(self, pvc: dict, reason: str, message: str) -> None:
        if (pvc.get("status") or {}).get("phase") != "Lost":
            self._claim_status(pvc, "Lost", None)
            self.recorder.emit(pvc, "Warning", reason, message)

    def _assign_default_class(self, pvc: dict) -> bool:
        """``assignDefaultStorageClass`` (RetroactiveDefaultStorageClass, GA 1.28)."""
        if "storageClassName" in (pvc.get("spec") or {}):
            return False
        default = storage_api.default_class(self.store.list_page("storageclasses")[1])
        if default is None:
            return False
        self.store.patch("persistentvolumeclaims", pvc["metadata"]["name"],
                         {"metadata": {"resourceVersion": pvc["metadata"]["resourceVersion"]},
                          "spec": {"storageClassName": default["metadata"]["name"]}},
                         MERGE, pvc["metadata"]["namespace"])
        return True

    def _wait_for_consumer(self, pvc: dict) -> None:
        """``emitEventForUnboundDelayBindingClaim``."""
        ns, name = pvc["metadata"]["namespace"], pvc["metadata"]["name"]
        waiting = [p["metadata"]["name"] for p in self.store.list_page("pods", ns)[1]
                   if not (p.get("spec") or {}).get("nodeName") and any(
                       (v.get("persistentVolumeClaim") or {}).get("claimName") == name
                       for v in (p.get("spec") or {}).get("volumes") or [])]
        if not waiting:
            self.recorder.emit(pvc, "Normal", "WaitForFirstConsumer",
                               "waiting for first consumer to be created before binding")
        elif len(waiting) == 1:
            self.recorder.emit(pvc, "Normal", "WaitForPodScheduled", f"waiting for pod {waiting[0]} to be scheduled")
        else:
            self.recorder.emit(pvc, "Normal", "WaitForPodScheduled",
                               f"waiting for pods {','.join(waiting)} to be scheduled")

    def _provision(self, pvc: dict, cls: dict | None) -> None:
        """``provisionClaim``: hand the claim to its provisioner."""
        if cls is None:
            self.recorder.emit(pvc, "Warning", "ProvisioningFailed",
                               f'storageclass.storage.k8s.io "{storage_api.claim_class(pvc)}" not found')
            return
        provisioner = str(cls.get("provisioner") or "")
        if provisioner.startswith("kubernetes.io/"):
            self.recorder.emit(pvc, "Warning", "ProvisioningFailed", f"no volume plugin matched name: {provisioner}")
            return
        annotations = pvc["metadata"].get("annotations") or {}
        if annotations.get(storage_api.ANN_STORAGE_PROVISIONER) != provisioner:
            pvc = self.store.patch("persistentvolumeclaims", pvc["metadata"]["name"],
                                   {"metadata": {"resourceVersion": pvc["metadata"]["resourceVersion"],
                                                 "annotations": {storage_api.ANN_STORAGE_PROVISIONER: provisioner,
                                                                 storage_api.ANN_BETA_STORAGE_PROVISIONER: provisioner}}},
                                   MERGE, pvc["metadata"]["namespace"])
        self.recorder.emit(pvc, "Normal", "ExternalProvisioning",
                           f"Waiting for a volume to be created either by the external provisioner '{provisioner}' "
                           "or manually by the system administrator. If volume creation is delayed, please verify "
                           "that the provisioner is running and correctly registered.")

    # -- binding (pv_controller.go bind) --
    def _bind(self, volume: dict, pvc: dict) -> None:
        meta = pvc["metadata"]
        if not storage_api.is_volume_bound_to_claim(volume, pvc) or not volume["spec"]["claimRef"].get("uid"):
            ref = {"kind": "PersistentVolumeClaim", "namespace": meta["namespace"], "name": meta["name"],
                   "uid": meta["uid"], "apiVersion": "v1", "resourceVersion": meta["resourceVersion"]}
            patch: dict[str, Any] = {"metadata": {"resourceVersion": volume["metadata"]["resourceVersion"]},
                                     "spec": {"claimRef": ref}}
            if not (volume.get("spec") or {}).get("claimRef"):
                patch["metadata"]["annotations"] = {storage_api.ANN_BOUND_BY_CONTROLLER: "yes"}
            volume = self.store.patch("persistentvolumes", volume["metadata"]["name"], patch, MERGE)
        self._volume_phase(volume, "Bound")
        annotations = dict(meta.get("annotations") or {})
        if (pvc.get("spec") or {}).get("volumeName") != volume["metadata"]["name"] or \
                storage_api.ANN_BIND_COMPLETED not in annotations:
            new_ann = {storage_api.ANN_BIND_COMPLETED: "yes"}
            if not (pvc.get("spec") or {}).get("volumeName"):
                new_ann[storage_api.ANN_BOUND_BY_CONTROLLER] = "yes"
            pvc = self.store.patch("persistentvolumeclaims", meta["name"],
                                   {"metadata": {"resourceVersion": meta["resourceVersion"], "annotations": new_ann},
                                    "spec": {"volumeName": volume["metadata"]["name"]}}, MERGE, meta["namespace"])
        self._claim_status(pvc, "Bound", volume)

    def _claim_status(self, pvc: dict, phase: str, volume: dict | None) -> None:
        status = dict(pvc.get("status") or {}, phase=phase)
        if volume is not None:
            status["accessModes"] = list((volume.get("spec") or {}).get("accessModes") or [])
            status["capacity"] = dict((volume.get("spec") or {}).get("capacity") or {})
        if status != (pvc.get("status") or {}):
            self.store.replace("persistentvolumeclaims", pvc["metadata"]["name"],
                               {"metadata": {"resourceVersion": pvc["metadata"]["resourceVersion"]}, "status": status},
                               pvc["metadata"]["namespace"], subresource="status")

    def _volume_phase(self, volume: dict, phase: str) -> dict:
        if (volume.get("status") or {}).get("phase") == phase:
            return volume
        return self.store.patch("persistentvolumes", volume["metadata"]["name"],
                                {"metadata": {"resourceVersion": volume["metadata"]["resourceVersion"]},
                                 "status": {"phase": phase}}, MERGE, subresource="status")

    # -- volumes --
    def sync_volume(self, name: str) -> None:
        volume = self._get("persistentvolumes", name)
        if volume is None:
            return
        ref = (volume.get("spec") or {}).get("claimRef")
        if not ref or not ref.get("uid"):
            self._volume_phase(volume, "Available")  # unused, or pre-bound and waiting for its claim
            return
        pvc = self._get("persistentvolumeclaims", ref.get("name", ""), ref.get("namespace") or "default")
        if pvc is not None and pvc["metadata"]["uid"] != ref.get("uid"):
            pvc = None  # a new claim of the same name: the old one was deleted
        if pvc is None:
            if (volume.get("status") or {}).get("phase") not in ("Released", "Failed"):
                self._volume_phase(volume, "Released")
            return  # reclaim: Retain keeps it, an external provisioner deletes it
        bound_to = (pvc.get("spec") or {}).get("volumeName")
        if not bound_to:
            self.claims.add((pvc["metadata"]["namespace"], pvc["metadata"]["name"]))
        elif bound_to == name:
            self._volume_phase(volume, "Bound")
        elif storage_api.ANN_BOUND_BY_CONTROLLER in (volume["metadata"].get("annotations") or {}):
            # bound by this controller to a claim that is bound elsewhere: unbind
            volume = self.store.patch("persistentvolumes", name,
                                      {"metadata": {"resourceVersion": volume["metadata"]["resourceVersion"],
                                                    "annotations": {storage_api.ANN_BOUND_BY_CONTROLLER: None}},
                                       "spec": {"claimRef": None}}, MERGE)
            self._volume_phase(volume, "Available")
