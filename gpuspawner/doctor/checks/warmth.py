"""Pools where an image of their profiles is on no node while pre-pulling is off: finding ``image-not-cached``.  Pure.

An image counts for a pool as on the spawn page: the profile admits the pool and its CUDA fits a
node of the pool (``checks.images``). Pools whose kubelets report no image at all are not judged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.capacity.labels import node_record
from gpuspawner.capacity.nodeimages import node_images, normalize_image
from gpuspawner.doctor.checks.images import fits_some_node
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


def _cold(pool_id: str, members: list[Mapping[str, Any]], hub: HubFacts) -> list[ProfileImage]:
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
        if img.cuda.has_cuda and not fits_some_node(img, members, hub):
            continue  # not offered there: image-driver-mismatch says why
        cold[ref] = img
    return list(cold.values())


def check_image_warmth(nodes: Sequence[Mapping[str, Any]], hub: HubFacts,
                       config: CapacityConfig) -> list[Finding]:
    """``image-not-cached`` (warning): per pool, the images of its profiles that no node of the pool
    holds (``status.images``) while ``gpu_prepull`` is off, so the first server of each there waits
    for a whole pull. Nothing without ``--config`` or with pre-pulling on."""
    if hub.source is None or hub.prepull:
        return []
    out: list[Finding] = []
    for pool_id, members in sorted(_pools(nodes, config).items()):
        cold = _cold(pool_id, members, hub)
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
