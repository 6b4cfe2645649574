"""The pre-puller's plan: for each GPU pool, the DaemonSet that warms the images that can run there.

Pure: offers and pools in, Kubernetes manifests out. Why and how: docs/prepull.md.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuspawner.capacity.model import PoolView
from gpuspawner.spawn.overrides import PoolNotPinnable, pool_match_terms, pool_tolerations
from gpuspawner.spawn.pending_verdicts import POOL_ANNOTATION  # the pool a DaemonSet warms (as a pod's)
from gpuspawner.spawn.profiles import ProfileOffer

#: Labels on every object the pre-puller owns; the reconciler lists by the first two.
MANAGED_BY = ("app.kubernetes.io/managed-by", "gpuspawner")
COMPONENT = ("app.kubernetes.io/component", "gpu-image-puller")
#: A digest of the DaemonSet's spec: the reconciler replaces an object whose digest differs.
SPEC_ANNOTATION = "gpuspawner.io/prepull-spec"

_NAME_PREFIX = "gpuspawner-prepull-"
_DNS_LABEL = re.compile(r"[^a-z0-9-]+")


@dataclass(frozen=True)
class PrepullSettings:
    """What the admin set for the pre-puller (``GPUSpawner.gpu_prepull_*``)."""

    namespace: str
    pause_image: str = "registry.k8s.io/pause:3.10"
    priority_class: str | None = None
    allowed_taint_keys: tuple[str, ...] = ()
    # the object every DaemonSet is owned by (garbage-collected with it), e.g. the hub's Deployment:
    # {"apiVersion": "apps/v1", "kind": "Deployment", "name": "hub", "uid": "..."}
    owner: Mapping[str, str] | None = None
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PoolPull:
    """One pool's DaemonSet: its name, the images it warms, the manifest."""

    pool_id: str
    name: str
    images: tuple[str, ...]
    manifest: dict[str, Any]


def pool_images(offers: Mapping[str, ProfileOffer]) -> dict[str, tuple[str, ...]]:
    """Pool id -> the images of every profile and image choice that can run there.

    An image can run on a pool when the spawn page would offer it there: the CUDA verdict
    (``PoolFit``) does not refuse it. An image that declares no CUDA is not checked by the
    page, so it is warmed wherever its profile offers the pool. Sorted, each once.
    """
    found: dict[str, set[str]] = {}
    for offer in offers.values():
        images = offer.spec.images
        for pool_offer in offer.pools:
            for key, image in images.images.items():
                if not image.name:
                    continue
                fit = pool_offer.fit(key)
                if fit is not None and fit.refused:
                    continue
                found.setdefault(pool_offer.pool.id, set()).add(image.name)
    return {pool: tuple(sorted(names)) for pool, names in found.items()}


def daemonset_name(pool_id: str) -> str:
    """A DNS-1123 name for the pool's DaemonSet, at most 63 characters, stable per pool id.

    Readable part from the pool id, then 8 hex digits of its SHA-256, so two pools whose ids
    read the same once reduced never share a name."""
    digest = hashlib.sha256(pool_id.encode()).hexdigest()[:8]
    readable = _DNS_LABEL.sub("-", pool_id.lower()).strip("-")
    room = 63 - len(_NAME_PREFIX) - 1 - len(digest)
    readable = readable[:room].strip("-")
    return f"{_NAME_PREFIX}{readable}-{digest}" if readable else f"{_NAME_PREFIX}{digest}"


def _container_name(index: int) -> str:
    return f"pull-{index}"


def daemonset(pool: PoolView, images: Sequence[str], settings: PrepullSettings) -> dict[str, Any]:
    """The DaemonSet that pulls ``images`` on the nodes of ``pool`` only.

    Each image is an init container that exits at once (the kubelet pulls it to run it), then a
    pause container keeps the pod, so a node that joins later pulls too. Requests are zero, the
    pods are pinned to the pool by the same node affinity and tolerations as a server there
    (``overrides.pool_match_terms``, ``pool_tolerations``), and they run as nobody with no token.
    Raises ``PoolNotPinnable`` for a pool that no expression can keep a pod inside.
    """
    name = daemonset_name(pool.id)
    selector = {"gpuspawner.io/prepull": name}
    labels = {**dict(settings.labels), MANAGED_BY[0]: MANAGED_BY[1], COMPONENT[0]: COMPONENT[1], **selector}
    nothing = {"requests": {"cpu": "0", "memory": "0"}, "limits": {"cpu": "100m", "memory": "64Mi"}}
    security = {
        "runAsNonRoot": True,
        "runAsUser": 65534,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    init = [
        {
            "name": _container_name(i),
            "image": image,
            "imagePullPolicy": "IfNotPresent",
            # the image's own shell, as Zero to JupyterHub's puller does; if the image has none,
            # the container fails after the pull, which is all that was wanted
            "command": ["/bin/sh", "-c", "exit 0"],
            "resources": nothing,
            "securityContext": security,
        }
        for i, image in enumerate(images)
    ]
    spec: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 0,
        "enableServiceLinks": False,
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": term} for term in pool_match_terms(pool)]
                }
            }
        },
        "tolerations": pool_tolerations(pool.taints, settings.allowed_taint_keys),
        "initContainers": init,
        "containers": [
            {
                "name": "pause",
                "image": settings.pause_image,
                "resources": nothing,
                "securityContext": security,
            }
        ],
    }
    if settings.priority_class:
        spec["priorityClassName"] = settings.priority_class
    body = {
        "selector": {"matchLabels": selector},
        "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%"}},
        "template": {"metadata": {"labels": labels}, "spec": spec},
    }
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": settings.namespace,
        "labels": labels,
        "annotations": {POOL_ANNOTATION: pool.id, SPEC_ANNOTATION: spec_digest(body)},
    }
    if settings.owner:
        metadata["ownerReferences"] = [{**dict(settings.owner), "blockOwnerDeletion": False}]
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": metadata, "spec": body}


def spec_digest(spec: Mapping[str, Any]) -> str:
    """A short digest of a DaemonSet spec, to tell an outdated object from a current one."""
    return hashlib.sha256(json.dumps(spec, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def plan(
    offers: Mapping[str, ProfileOffer], pools: Iterable[PoolView], settings: PrepullSettings
) -> tuple[dict[str, PoolPull], list[str]]:
    """The DaemonSets the pools need (name -> :class:`PoolPull`) and the problems found.

    A pool with no image to warm gets no DaemonSet; a pool no expression can pin is reported
    (one line) rather than warmed on nodes outside it."""
    images = pool_images(offers)
    wanted: dict[str, PoolPull] = {}
    problems: list[str] = []
    for pool in pools:
        names = images.get(pool.id)
        if not names:
            continue
        try:
            manifest = daemonset(pool, names, settings)
        except PoolNotPinnable as e:
            problems.append(f"images are not pre-pulled on {pool.id}: {e}")
            continue
        pull = PoolPull(pool.id, manifest["metadata"]["name"], names, manifest)
        wanted[pull.name] = pull
    return wanted, problems
