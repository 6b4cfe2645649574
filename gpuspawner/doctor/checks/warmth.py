"""Pools where an image of their profiles is on no node while pre-pulling is off: finding ``image-not-cached``.  Pure.

An image counts for a pool as on the spawn page: the profile admits the pool and its CUDA fits a
node of the pool (``checks.images``). A DRA pool's nodes are those its ResourceSlices give devices
(the capacity cache's DRA accounting). Pools whose kubelets report no image at all are not judged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.capacity.dra_objects import class_record, dra_node, slice_record
from gpuspawner.capacity.dra_accounts import DraAccounts
from gpuspawner.capacity.labels import node_record
from gpuspawner.capacity.nodeimages import node_images, normalize_image
from gpuspawner.doctor.checks.images import fits_some_node, fits_some_pool_node
from gpuspawner.doctor.dra_state import DraState
from gpuspawner.doctor.facts import HubFacts, ProfileImage
from gpuspawner.doctor.findings import Finding, ObjectRef, plural

__all__ = ["check_image_warmth"]


def _pools(nodes: Sequence[Mapping[str, Any]], config: CapacityConfig) -> dict[str, list[Mapping[str, Any]]]:
    """Pool id -> its Ready, schedulable GPU nodes."""
    pools: dict[str, list[Mapping[str, Any]]] = {}
    for node in nodes:
        rec = node_record(node, config)
        if rec is None or not rec.contributes:
            continue
        for g in rec.gpus:
            pools.setdefault(g.pool_id, []).append(node)
    return pools


def _dra_pools(nodes: Sequence[Mapping[str, Any]], dra: DraState | None,
               config: CapacityConfig) -> dict[str, tuple[Any, list[Mapping[str, Any]]]]:
    """DRA pool id -> (its view, its Ready, schedulable nodes), counted as the capacity cache counts
    them (``capacity.dra_accounts``); nothing where DRA is not served or its lists were forbidden."""
    if dra is None or not dra.served or dra.slices is None or dra.classes is None:
        return {}
    accounts = DraAccounts()
    for obj in dra.classes:
        rec = class_record(obj)
        if rec is not None:
            accounts.upsert_class(rec)
    by_name: dict[str, Mapping[str, Any]] = {}
    for node in nodes:
        rec = dra_node(node, config.node_group_labels, config.is_gpu_resource)
        if rec is not None:
            accounts.upsert_node(rec)
            by_name[rec.name] = node
    for obj in dra.slices:
        rec = slice_record(obj, config.dra_drivers)
        if rec is not None:
            accounts.upsert_slice(rec)
    return {pool.id: (pool, [by_name[v.name] for v in pool.node_views]) for pool in accounts.ledger.pools()}


def _cold(pool_id: str, members: list[Mapping[str, Any]], hub: HubFacts,
          fits: Callable[[ProfileImage], bool]) -> list[ProfileImage]:
    """The images the pool can run (each once, by reference) that none of its nodes holds."""
    held: set[str] = set()
    for node in members:
        held.update(node_images(node.get("status")))
    if not held:
        return []  # the kubelets report no image (--node-status-max-images=0): nothing to judge by
    cold: dict[str, ProfileImage] = {}
    for img in hub.images:
        ref = normalize_image(img.image) if img.image else None
        if ref is None or ref in held or ref in cold or not img.admits(pool_id):
            continue
        if img.cuda.has_cuda and not fits(img):
            continue  # not offered there: image-driver-mismatch says why
        cold[ref] = img
    return list(cold.values())


def check_image_warmth(nodes: Sequence[Mapping[str, Any]], hub: HubFacts,
                       config: CapacityConfig, dra: DraState | None = None) -> list[Finding]:
    """``image-not-cached`` (warning): per pool (DRA pools too, from ``dra``), the images of its
    profiles that no node of the pool holds (``status.images``) while ``gpu_prepull`` is off, so the
    first server of each there waits for a whole pull. Nothing without ``--config`` or with
    pre-pulling on."""
    if hub.source is None or hub.prepull:
        return []
    pools: dict[str, tuple[list[Mapping[str, Any]], Callable[[ProfileImage], bool]]] = {}
    for pool_id, members in _pools(nodes, config).items():
        pools[pool_id] = (members, lambda img, members=members: fits_some_node(img, members, hub))
    for pool_id, (view, members) in _dra_pools(nodes, dra, config).items():
        pools[pool_id] = (members, lambda img, view=view: fits_some_pool_node(img, view, hub))
    out: list[Finding] = []
    for pool_id, (members, fits) in sorted(pools.items()):
        cold = _cold(pool_id, members, hub, fits)
        if not cold:
            continue
        images = [img.image for img in cold]
        out.append(Finding(
            "image-not-cached",
            "warning",
            f"Pool {pool_id}: {plural(len(images), 'image')} of its profiles ({', '.join(images)}) "
            f"{'is' if len(images) == 1 else 'are'} on none of its {plural(len(members), 'node')}, and "
            "pre-pulling is off: the first server of each there waits for the whole image to be pulled "
            "(CUDA images are 12-20 GB).",
            "Turn pre-pulling on: c.GPUSpawner.gpu_prepull = True, with the Role gpuspawner-prepull of "
            "deploy/rbac.yaml (docs/prepull.md); or pull the images onto the pool's nodes in their machine image.",
            (ObjectRef("Pool", pool_id), *(ObjectRef("Profile", img.label) for img in cold)),
            {"pool": pool_id, "images": images, "nodes": len(members)},
        ))
    return out
