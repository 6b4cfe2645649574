"""Images whose CUDA does not fit the GPU nodes' drivers: findings ``image-driver-mismatch``,
``image-driver-partial`` and ``cuda-check-error``.  Pure.  Design notes: docs/troubleshooting.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.capacity.labels import driver_versions, gpu_facts, node_record
from gpuspawner.capacity.model import PoolView
from gpuspawner.cuda.custom import safe_verdict
from gpuspawner.cuda.image import ImageCuda
from gpuspawner.cuda.compatibility import POLICIES, NodeCuda, Verdict
from gpuspawner.cuda.table import min_driver_for_cuda
from gpuspawner.doctor.facts import HubFacts, ProfileImage
from gpuspawner.doctor.findings import Finding, ObjectRef, names, node_ref, plural
from gpuspawner.kube import objects
from gpuspawner.spawn.cuda_fit import node_cuda

__all__ = ["check_images", "fits_some_node", "fits_some_pool_node"]

#: a judged node and the NVIDIA pools it is in
Judged = tuple[Mapping[str, Any], list[str]]
NodeVerdicts = list[tuple[ObjectRef, Verdict]]


def _node_cuda(node: Mapping[str, Any]) -> NodeCuda:
    # the same view of a node the spawner builds (cudafit.node_cuda)
    labels = objects.labels(node)
    driver, cuda, cc = driver_versions(labels)
    return node_cuda(objects.name(node), driver, cuda, cc, gpu_facts("nvidia.com/gpu", labels).product)


def _verdict(hub: HubFacts, image: ImageCuda, node: NodeCuda) -> Verdict:
    """The hub's ``cuda_check`` on one node, called as the spawner calls it: a callable that
    raises or returns something else gives a ``check-error`` skip."""
    return safe_verdict(hub.cuda_check, image, node, hub.cuda_policy)


def _image_fix(img: ProfileImage, failing: Sequence[tuple[ObjectRef, Verdict]], bad_pools: Sequence[str]) -> str:
    """What the admin can do: driver, image, or pools (the verdicts' own fixes are worded for users)."""
    parts = []
    refs = [r for r, _ in failing]
    arch = [r for r, v in failing if v.rule == "arch-floor"]
    cuda = img.cuda.effective_cuda
    if len(arch) < len(failing):
        row = min_driver_for_cuda(cuda) if cuda else None
        driver = f"NVIDIA driver {row.min_driver_text} or newer" if row and row.min_driver else "a newer NVIDIA driver"
        parts.append(f"install {driver} on {names([r for r in refs if r not in arch])}")
        olds = sorted({v.driver_cuda for _, v in failing if v.driver_cuda}, key=lambda t: tuple(map(int, t.split("."))))
        if olds:
            parts.append(f"use an image built with CUDA {olds[0]} or older")
    if arch:
        parts.append(f"use an image of an older CUDA major version for the GPUs of {names(arch)} "
                     f"({failing[[r for r, _ in failing].index(arch[0])][1].reason})")
    if bad_pools:
        parts.append(f'keep the profile off those pools: "pools": {{"exclude": {json.dumps(list(bad_pools))}}}')
    parts.append("or correct the profile's \"cuda\" declaration if it is wrong")
    text = "; ".join(parts)
    return text[0].upper() + text[1:] + "."


def _judged_nodes(nodes: Sequence[Mapping[str, Any]], config: CapacityConfig) -> list[Judged]:
    """Ready, schedulable NVIDIA nodes with allocatable GPUs, with their pools."""
    out = []
    for node in nodes:
        rec = node_record(node, config)
        if rec is None or not rec.contributes:
            continue
        nvidia_pools = [g.pool_id for g in rec.gpus if g.resource.startswith("nvidia.com/")]
        if nvidia_pools:
            out.append((node, nvidia_pools))
    return out


def _judge(img: ProfileImage, judged: list[Judged], hub: HubFacts) -> tuple[NodeVerdicts, NodeVerdicts]:
    """The verdicts on the nodes of the pools the profile admits (nodes without driver labels
    give a ``skip`` and are left to ``gfd-labels-missing``), and the check's errors."""
    verdicts: NodeVerdicts = []
    errors: NodeVerdicts = []
    for node, pools in judged:
        if any(img.admits(p) for p in pools):
            v = _verdict(hub, img.cuda, _node_cuda(node))
            if v.rule == "check-error":
                errors.append((node_ref(node), v))
            elif v.level != "skip":
                verdicts.append((node_ref(node), v))
    return verdicts, errors


def fits_some_node(img: ProfileImage, nodes: Sequence[Mapping[str, Any]], hub: HubFacts) -> bool:
    """Whether the hub's CUDA check lets ``img`` run on at least one of ``nodes`` (a node it cannot
    judge, with no driver labels or a failing check, counts as fitting, as the spawner lets it)."""
    return any(_verdict(hub, img.cuda, _node_cuda(node)).level != "fail" for node in nodes)


def fits_some_pool_node(img: ProfileImage, pool: PoolView, hub: HubFacts) -> bool:
    """:func:`fits_some_node` on a pool's own node views (a DRA pool: its devices' driver and CUDA
    versions, from the ResourceSlices)."""
    return any(_verdict(hub, img.cuda, node_cuda(v.name, v.driver_version, v.cuda_version, v.compute_capability,
                                                 pool.product)).level != "fail" for v in pool.node_views)


def _check_error(img: ProfileImage, errors: NodeVerdicts) -> Finding:
    reason = errors[0][1].reason
    return Finding(
        "cuda-check-error",
        "warning",
        f"Profile {img.label}: the hub's CUDA check failed on "
        f"{plural(len(errors), 'node')} ({names([r for r, _ in errors])}): {reason.rstrip('.')}; "
        "the spawner then lets servers start unchecked.",
        "Fix the callable in c.GPUSpawner.cuda_check (it must return a gpuspawner.cuda.Verdict), "
        'or remove the setting to use the default "gpuspawner.cuda:decide".',
        (ObjectRef("Profile", img.label), *(r for r, _ in errors)),
        {"reason": reason},
    )


def _bad_pools(img: ProfileImage, judged: list[Judged], verdicts: NodeVerdicts) -> list[str]:
    """Pools whose every judged node fails: what the profile could exclude."""
    failing = {r.name for r, v in verdicts if v.level == "fail"}
    fitting = {r.name for r, v in verdicts if v.level != "fail"}
    bad = {p for n, pools in judged if objects.name(n) in failing for p in pools if img.admits(p)}
    good = {p for n, pools in judged if objects.name(n) in fitting for p in pools}
    return sorted(bad - good)


def _misfit(img: ProfileImage, hub: HubFacts, verdicts: NodeVerdicts, bad_pools: list[str]) -> Finding:
    """``image-driver-mismatch`` when no judged node fits, else ``image-driver-partial``."""
    failing = [(r, v) for r, v in verdicts if v.level == "fail"]
    ref = ObjectRef("Profile", img.label)
    cuda = img.cuda.cuda_text or "?"
    name = img.image or "the default image"
    details = {
        "image": img.image,
        "image_cuda": img.cuda.cuda_text,
        "policy": hub.cuda_policy,
        "verdicts": {r.name: v.to_json() for r, v in verdicts},
    }
    nodes_failing = tuple(r for r, _ in failing)
    if len(failing) == len(verdicts):
        return Finding(
            "image-driver-mismatch",
            "error",
            f"Profile {img.label}: image {name} (CUDA {cuda}) fits the NVIDIA driver of none of "
            f"its {plural(len(verdicts), 'GPU node')}. {failing[0][1].reason}",
            _image_fix(img, failing, ()),  # excluding every pool would leave nothing
            (ref, *nodes_failing),
            details,
        )
    fits = len(verdicts) - len(failing)
    return Finding(
        "image-driver-partial",
        "info",
        f"Profile {img.label}: image {name} (CUDA {cuda}) fits {fits} of "
        f"{plural(len(verdicts), 'GPU node')}; the drivers of {names(nodes_failing)} are too old "
        "for it, so the spawner keeps its servers off them"
        + (f" and pools {', '.join(bad_pools)} cannot serve it." if bad_pools else "."),
        _image_fix(img, failing, bad_pools),
        (ref, *nodes_failing),
        {**details, "pools_failing": bad_pools},
    )


def check_images(
    nodes: Sequence[Mapping[str, Any]],
    hub: HubFacts,
    config: CapacityConfig,
) -> list[Finding]:
    """``image-driver-mismatch`` (the image fits no node of its profile's
    pools: the spawner refuses every such spawn), ``image-driver-partial``
    (info: some nodes do not fit; the spawner keeps servers off them,
    ``cudafit.steering_expression``) and ``cuda-check-error`` (the hub's
    ``cuda_check`` fails).
    """
    if hub.cuda_policy not in POLICIES:
        raise ValueError(f"unknown CUDA policy {hub.cuda_policy!r}: use one of {', '.join(POLICIES)}")
    judged = _judged_nodes(nodes, config)
    out: list[Finding] = []
    for img in hub.images:
        if not img.cuda.has_cuda:
            continue
        verdicts, errors = _judge(img, judged, hub)
        if errors:
            out.append(_check_error(img, errors))
        if any(v.level == "fail" for _, v in verdicts):
            out.append(_misfit(img, hub, verdicts, _bad_pools(img, judged, verdicts)))
    return out
