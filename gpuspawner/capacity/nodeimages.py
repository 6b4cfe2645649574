"""Which GPU nodes hold which container images (``node.status.images``), counted per pool as nodes change.

Pure: stdlib only. Fed by the capacity cache's node informer and the DRA ledger's pool members; read
per image and pool at no cost per node.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["NodeImages", "normalize_image", "node_images"]

_DEFAULT_DOMAIN = "docker.io"
_LEGACY_DOMAINS = ("index.docker.io", "registry-1.docker.io")
_TOO_LONG = 1024  # an image reference longer than this is no reference (the registry's limit is 255 per name)


def normalize_image(ref: Any) -> str | None:
    """The one spelling of an image reference that the pod spec and the kubelet's
    ``status.images`` names share, or None for something that is no reference.

    Docker's rules for a familiar name (``github.com/distribution/reference``, ``normalize.go``
    ``ParseNormalizedNamed``): no registry is ``docker.io``, a one-part Docker Hub name is
    ``library/<name>``; kube-scheduler's ImageLocality scorer adds the default tag ``latest``
    where none is given (``pkg/scheduler/framework/plugins/imagelocality/image_locality.go``,
    ``normalizedImageName``); a digest names the content, so ``repo:tag@sha256:...`` is
    ``repo@sha256:...``, the name containerd reports for it.
    """
    return _normalize(ref) if isinstance(ref, str) else None


@functools.lru_cache(maxsize=8192)  # the same names come from every node of a pool
def _normalize(ref: str) -> str | None:
    ref = ref.strip()
    if not ref or len(ref) > _TOO_LONG or any(c.isspace() for c in ref):
        return None
    name, at, digest = ref.partition("@")
    first, slash, rest = name.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        domain, path = first, rest
    else:
        domain, path = _DEFAULT_DOMAIN, name
    if domain in _LEGACY_DOMAINS:
        domain = _DEFAULT_DOMAIN
    if not path:
        return None
    if domain == _DEFAULT_DOMAIN and "/" not in path:
        path = f"library/{path}"
    last = path.rsplit("/", 1)[-1]
    if at:
        if not digest:
            return None
        repo = path.rsplit(":", 1)[0] if ":" in last else path
        return f"{domain}/{repo}@{digest}"
    if ":" not in last:
        path += ":latest"
    return f"{domain}/{path}"


def node_images(status: Any) -> dict[str, int]:
    """Normalised image reference -> size in bytes, from a Node's ``status`` (``images[].names``,
    ``sizeBytes``). Entries of the wrong shape are skipped: one odd node never stops the informer."""
    images = status.get("images") if isinstance(status, Mapping) else None
    found: dict[str, int] = {}
    if not isinstance(images, list):
        return found
    for entry in images:
        if not isinstance(entry, Mapping):
            continue
        names = entry.get("names")
        size = entry.get("sizeBytes")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            size = 0
        if not isinstance(names, list):
            continue
        for raw in names:
            ref = normalize_image(raw)
            if ref is not None:
                found[sys.intern(ref)] = max(size, found.get(ref, 0))
    return found


class NodeImages:
    """Per pool, which of its contributing nodes hold each image; per image, its size.

    A node is in the pools of its device-plugin GPUs (:meth:`update`) and in the DRA pools whose
    devices it contributes (:meth:`dra_member`, fed by the DRA ledger as nodes join and leave its
    pools). Every change is applied where it happens (one node's images or pools), so reading a
    count, a size or a few warm node names never walks the nodes."""

    def __init__(self) -> None:
        self._images: dict[str, dict[str, int]] = {}  # node -> ref -> bytes (GPU nodes; others kept for DRA)
        self._plugin: dict[str, tuple[str, ...]] = {}  # device-plugin GPU node -> its contributing pools
        self._dra: dict[str, set[str]] = {}  # node -> the DRA pools it contributes to
        self._counted: dict[str, tuple[tuple[str, ...], dict[str, int]]] = {}  # node -> (pools, images)
        self._members: dict[str, int] = {}  # pool -> its contributing nodes
        self._holders: dict[str, dict[str, set[str]]] = {}  # pool -> image -> nodes holding it
        self._sizes: dict[str, dict[str, int]] = {}  # image -> node -> its size there
        self.generation = 0  # bumps on every change (a page rendered from older counts is redone)

    def update(self, node: str, pools: Iterable[str], images: Mapping[str, int]) -> bool:
        """Device-plugin GPU node ``node`` now contributes to ``pools`` and holds ``images``
        (ref -> bytes); False: no change."""
        self._images[node] = dict(images)
        self._plugin[node] = tuple(sorted(set(pools)))
        return self._settle(node)

    def update_other(self, node: str, images: Mapping[str, int]) -> bool:
        """``node`` publishes no device-plugin GPU: it counts in the DRA pools it contributes to
        (if any), with ``images``. Pass ``{}`` where no DRA pool can take it (nothing is kept)."""
        self._plugin.pop(node, None)
        if images:
            self._images[node] = dict(images)
        else:
            self._images.pop(node, None)
        return self._settle(node)

    def dra_member(self, pool: str, node: str, joined: bool) -> None:
        """``node`` joined (or left) DRA pool ``pool`` as a contributing node."""
        member = self._dra.setdefault(node, set())
        if joined:
            member.add(pool)
        else:
            member.discard(pool)
            if not member:
                del self._dra[node]
        self._settle(node)

    def remove(self, node: str) -> bool:
        """The Node is gone: its images and device-plugin pools are forgotten (its DRA pools
        follow the DRA ledger, which drops it too)."""
        self._images.pop(node, None)
        self._plugin.pop(node, None)
        return self._settle(node)

    def retain(self, keep: set[str]) -> int:
        """Forget every node not in ``keep`` (after a re-list); returns how many."""
        gone = [n for n in set(self._images) | set(self._plugin) if n not in keep]
        for n in gone:
            self.remove(n)
        return len(gone)

    def _settle(self, node: str) -> bool:
        """Move the counts from what ``node`` counted for to what it counts for now."""
        if node in self._plugin or node in self._dra:  # a GPU node: its sizes count, in its pools if any
            pools = tuple(sorted(set(self._plugin.get(node, ())).union(self._dra.get(node, ()))))
            new = (pools, self._images.get(node, {}))
        else:
            new = None
        old = self._counted.get(node)
        if old == new:
            return False
        if old is not None:
            self._count(node, *old, -1)
        if new is None:
            del self._counted[node]
        else:
            self._counted[node] = new
            self._count(node, *new, 1)
        self.generation += 1
        return True

    def _count(self, node: str, pools: tuple[str, ...], images: dict[str, int], sign: int) -> None:
        for ref, size in images.items():
            on = self._sizes.setdefault(ref, {})
            if sign > 0:
                on[node] = size
            else:
                on.pop(node, None)
                if not on:
                    del self._sizes[ref]
        for pool in pools:
            self._members[pool] = self._members.get(pool, 0) + sign
            held = self._holders.setdefault(pool, {})
            for ref in images:
                nodes = held.setdefault(ref, set())
                if sign > 0:
                    nodes.add(node)
                else:
                    nodes.discard(node)
                    if not nodes:
                        del held[ref]
            if not self._members[pool]:
                del self._members[pool]
                self._holders.pop(pool, None)

    # -- reading --------------------------------------------------------------

    def nodes(self, pool: str) -> int:
        """The pool's contributing nodes (Ready, schedulable) that this count covers."""
        return self._members.get(pool, 0)

    def cached(self, pool: str, image: str) -> int:
        """How many of the pool's contributing nodes hold ``image`` (any spelling)."""
        ref = normalize_image(image)
        return len(self._holders.get(pool, {}).get(ref, ())) if ref else 0

    def warm_nodes(self, pool: str, image: str) -> frozenset[str]:
        """The pool's contributing nodes that hold ``image``."""
        ref = normalize_image(image)
        return frozenset(self._holders.get(pool, {}).get(ref, ())) if ref else frozenset()

    def size(self, image: str) -> int | None:
        """The image's size in bytes as the nodes that hold it report it (the largest), or None
        when no GPU node holds it (or none reports a size)."""
        ref = normalize_image(image)
        on = self._sizes.get(ref) if ref else None
        return (max(on.values()) or None) if on else None

    def holds(self, node: str, image: str) -> bool:
        """Whether ``node`` holds ``image``."""
        ref = normalize_image(image)
        return bool(ref and ref in self._images.get(node, ()))

    @property
    def node_count(self) -> int:
        """The nodes whose images are kept (GPU nodes, and others while DRA pools may take them)."""
        return len(self._images.keys() | self._plugin.keys() | self._dra.keys())


def note_node(images: NodeImages, obj: Mapping[str, Any], rec: Any, *, dra: bool = False) -> None:
    """Feed one Node object to ``images``: ``rec`` is its ``labels.NodeRecord`` (None: no
    device-plugin GPU node). Only a contributing node (Ready, schedulable) counts in its pools, as
    the ledger counts its GPUs. ``dra``: DRA pools may take any node (its ResourceSlices, which
    may come later, say), so the images of every node are kept; else only GPU nodes'."""
    if rec is None:
        name = (obj.get("metadata") or {}).get("name") if isinstance(obj, Mapping) else None
        if isinstance(name, str):
            images.update_other(name, node_images(obj.get("status")) if dra else {})
        return
    pools = [g.pool_id for g in rec.gpus] if rec.contributes else []
    images.update(rec.name, pools, node_images(obj.get("status")))
