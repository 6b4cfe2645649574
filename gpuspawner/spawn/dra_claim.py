"""What a server's pod needs to get GPUs from a DRA pool: a ResourceClaimTemplate and two fields."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gpuspawner.capacity.dra_objects import ATTR_CUDA, ATTR_DRIVER, ATTR_PRODUCT, ATTR_PROFILE, ATTR_TYPE, semver_text
from gpuspawner.capacity.labels import version_key
from gpuspawner.capacity.model import DriverGroup, NodeView, PoolView
from gpuspawner.kube.times import parse_time
from gpuspawner.spawn.cuda_fit import PoolFit
from gpuspawner.spawn.pending_verdicts import GPUS_ANNOTATION, POOL_ANNOTATION

__all__ = [
    "CLAIM_NAME",
    "REQUEST_NAME",
    "TEMPLATE_LABELS",
    "cel_string",
    "product_selectors",
    "cuda_selector",
    "device_request",
    "claim_template",
    "template_name",
    "pod_resource_claim",
    "container_claim",
    "merge_named",
    "probe_with_claim",
    "unused_templates",
]

#: ``pod.spec.resourceClaims[].name`` of the server's GPUs (a DNS label an admin's claims are unlikely to use)
CLAIM_NAME = "gpuspawner-gpus"
#: ``spec.devices.requests[].name`` in the template
REQUEST_NAME = "gpus"
#: labels of the templates gpuspawner manages (and of the claims made from them)
TEMPLATE_LABELS = {"app.kubernetes.io/managed-by": "gpuspawner", "app.kubernetes.io/component": "gpu-claim"}
API_VERSION = "resource.k8s.io/v1"


def cel_string(value: str) -> str:
    """A CEL string literal (single quotes; backslash and quote escaped)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _attr(driver: str, name: str) -> str:
    return f"device.attributes[{cel_string(driver)}].{name}"


def product_selectors(pool: PoolView) -> list[str]:
    """CEL expressions every device of ``pool`` satisfies and devices of other products do not."""
    facts = pool.dra
    if facts is None:
        raise ValueError(f"pool {pool.id} is not a DRA pool")
    out = []
    for name, value in ((ATTR_TYPE, facts.device_type), (ATTR_PRODUCT, facts.product_name),
                        (ATTR_PROFILE, facts.profile)):
        if value is not None:
            out.append(f"{_attr(facts.driver, name)} == {cel_string(value)}")
    return out


def _floor(attr: str, driver: str, version: str) -> str:
    ref = _attr(driver, attr)
    guard = f"!({cel_string(attr)} in device.attributes[{cel_string(driver)}])"
    # devices that do not publish the version stay eligible, as nodes whose driver is unknown do
    return f"{guard} || {ref}.compareTo(semver({cel_string(version)})) >= 0"


def _values(nodes: Iterable[NodeView | DriverGroup], field: str) -> list[str] | None:
    """The field of every node (or driver group of nodes), or None when one of them does not know it."""
    out = []
    for n in nodes:
        value = getattr(n, field)
        if value is None:
            return None
        out.append(value)
    return out


def cuda_selector(pool: PoolView, fit: PoolFit | None) -> str | None:
    """A CEL selector that admits the devices whose driver fits the image and no failing one.

    From the CUDA check's verdict on each driver group of the pool's nodes (``fit``): a floor on
    ``cudaDriverVersion`` (the newest CUDA the driver supports, the value the rules compare)
    at the lowest fitting node's, when every failing node is below it; else a floor on
    ``driverVersion``; else the failing drivers are excluded one by one.  With no failing node
    the floor is still set at the lowest fitting driver, so a device on a node the hub has not
    seen yet gets the claim only if its driver is at least as new as one known to fit.  None
    when the image declares no CUDA, the pool is refused anyway, or nothing is known.
    """
    if fit is None or not fit.checked or fit.refused or pool.dra is None:
        return None
    driver = pool.dra.driver
    # one verdict per driver group of the pool's nodes (cuda_fit.pool_fit); a group's versions are its nodes'
    good = [g.group for g in fit.groups if g.group is not None and g.verdict.level in ("ok", "warn")]
    bad = [g.group for g in fit.groups if g.group is not None and g.verdict.level == "fail"]
    for attr, field in ((ATTR_CUDA, "cuda_version"), (ATTR_DRIVER, "driver_version")):
        good_v, bad_v = _values(good, field), _values(bad, field)
        if not good_v or bad_v is None:
            continue
        lowest = min(good_v, key=version_key)
        if all(version_key(b) < version_key(lowest) for b in bad_v):
            return _floor(attr, driver, semver_text(lowest) or lowest)
    bad_drivers = _values(bad, "driver_version")
    if not bad_drivers:
        return None
    ref = _attr(driver, ATTR_DRIVER)
    excluded = " && ".join(
        f"{ref}.compareTo(semver({cel_string(semver_text(v) or v)})) != 0" for v in sorted(set(bad_drivers))
    )
    return f"!({cel_string(ATTR_DRIVER)} in device.attributes[{cel_string(driver)}]) || ({excluded})"


def device_request(pool: PoolView, gpus: int, fit: PoolFit | None = None) -> dict[str, Any]:
    """The template's one request: ``gpus`` devices of the pool's class, product and drivers."""
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise ValueError(f"a GPU count must be a positive integer, not {gpus!r}")
    selectors = product_selectors(pool)
    cuda = cuda_selector(pool, fit)
    if cuda:
        selectors.append(cuda)
    assert pool.dra is not None
    exactly: dict[str, Any] = {
        "deviceClassName": pool.dra.device_class,
        "allocationMode": "ExactCount",
        "count": gpus,
    }
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    return {"name": REQUEST_NAME, "exactly": exactly}


def _slug(text: str, limit: int) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:limit].strip("-") or "pool"


def template_name(pool: PoolView, request: Mapping[str, Any]) -> str:
    """``gpuspawner-<group/product>-<count>-<digest>``: the same pool, count and selectors give the
    same name (a DNS label, at most 63 characters)."""
    digest = hashlib.sha256(
        json.dumps({"pool": pool.id, "request": request}, sort_keys=True).encode()
    ).hexdigest()[:10]
    tail = f"-{request['exactly']['count']}-{digest}"
    hint = _slug(f"{pool.node_group or ''}-{pool.product or ''}", 63 - len("gpuspawner-") - len(tail))
    return f"gpuspawner-{hint}{tail}"


def claim_template(pool: PoolView, gpus: int, namespace: str, fit: PoolFit | None = None) -> dict[str, Any]:
    """The ResourceClaimTemplate for ``gpus`` devices of ``pool`` in ``namespace``."""
    request = device_request(pool, gpus, fit)
    annotations = {POOL_ANNOTATION: pool.id, GPUS_ANNOTATION: str(gpus)}
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": template_name(pool, request),
            "namespace": namespace,
            "labels": dict(TEMPLATE_LABELS),
            "annotations": annotations,
        },
        "spec": {
            # copied onto each generated claim: doctor and kubectl see whose claims they are
            "metadata": {"labels": dict(TEMPLATE_LABELS), "annotations": dict(annotations)},
            "spec": {"devices": {"requests": [request]}},
        },
    }


def pod_resource_claim(template: str) -> dict[str, Any]:
    """The ``pod.spec.resourceClaims`` entry."""
    return {"name": CLAIM_NAME, "resourceClaimTemplateName": template}


def container_claim() -> dict[str, Any]:
    """The ``resources.claims`` entry of a container that uses the GPUs."""
    return {"name": CLAIM_NAME}


def merge_named(existing: Sequence[Mapping[str, Any]] | None, ours: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``existing`` (an admin's claims, kept in order and untouched) and ``ours``, which replaces
    only an entry of its own name (left by an earlier spawn)."""
    kept = [dict(e) for e in existing or () if e.get("name") != ours["name"]]
    return kept + [dict(ours)]


def probe_with_claim(probe: Mapping[str, Any], pool: PoolView, gpus: int) -> dict[str, Any]:
    """The on-node probe init container (``spawn.probe_container.probe_container``) for a DRA pool: it uses the
    server's claim instead of an extended resource (the init container and the notebook container
    share the claim's devices), and expects to see all of them unless they are MIG devices."""
    out = dict(probe)
    out["resources"] = {"claims": [container_claim()]}
    facts = pool.dra
    whole = facts is not None and facts.profile is None and facts.device_type != "mig"
    args = list(out.get("args") or [])
    if "--expect-gpus" in args:
        i = args.index("--expect-gpus") + 1
        args[i] = str(gpus if whole else 1)
    out["args"] = args
    return out


def _pod_templates(pod: Mapping[str, Any]) -> set[str]:
    spec = pod.get("spec") or {}
    out = set()
    for rc in spec.get("resourceClaims") or ():
        name = rc.get("resourceClaimTemplateName") if isinstance(rc, Mapping) else None
        if isinstance(name, str):
            out.add(name)
    return out


def unused_templates(
    templates: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    in_use: Iterable[str],
    now: float,
    grace: float,
) -> list[str]:
    """Names of managed templates no pod and no spawn in progress uses, older than ``grace``
    seconds (a spawn may have just made one and not created its pod yet)."""
    used = set(in_use)
    for pod in pods:
        used |= _pod_templates(pod)
    out = []
    for t in templates:
        meta = t.get("metadata") or {}
        name = meta.get("name")
        labels = meta.get("labels") or {}
        if not isinstance(name, str) or name in used:
            continue
        if any(labels.get(k) != v for k, v in TEMPLATE_LABELS.items()):
            continue
        created = parse_time(meta.get("creationTimestamp"))
        if created is not None and now - created.timestamp() < grace:
            continue
        out.append(name)
    return sorted(out)
