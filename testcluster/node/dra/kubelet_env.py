"""What the kubelet gives a container for its allocated DRA devices.
Design notes: docs/simulated-nodes.md.
"""

from __future__ import annotations

from typing import Any, Mapping

from .nvidia import DRIVER

NVIDIA_ENV = "NVIDIA_VISIBLE_DEVICES"


def device_plugin_requests(pod: Mapping[str, Any], requests: Mapping[str, int]) -> dict[str, int]:
    """``requests`` less the extended resources that a DRA claim serves for this pod."""
    mapped = {m.get("resourceName") for m in
              ((pod.get("status") or {}).get("extendedResourceClaimStatus") or {}).get("requestMappings") or []}
    return {r: n for r, n in requests.items() if r not in mapped}


def _claim_for(store, pod: Mapping[str, Any], pod_claim: str) -> Mapping[str, Any] | None:
    spec_claims = {c.get("name"): c for c in (pod.get("spec") or {}).get("resourceClaims") or []}
    pc = spec_claims.get(pod_claim)
    if pc is None:
        return None
    name = pc.get("resourceClaimName")
    if not name:
        name = next((s.get("resourceClaimName") for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
                     if s.get("name") == pod_claim), None)
    return _get_claim(store, (pod.get("metadata") or {}).get("namespace"), name) if name else None


def _get_claim(store, ns: str | None, name: str) -> Mapping[str, Any] | None:
    try:
        return store.get("resourceclaims", name, namespace=ns)
    except Exception as e:
        if getattr(e, "code", None) == 404:
            return None
        raise


def _results(claim: Mapping[str, Any] | None, request: str | None) -> list[Mapping[str, Any]]:
    results = ((((claim or {}).get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
    if request:
        results = [r for r in results if r.get("request") == request or str(r.get("request")).startswith(request + "/")]
    return results


def _uuid_index(store) -> dict[tuple[str, str, str], str]:
    """(driver, pool, device) -> the ``uuid`` attribute, from every ResourceSlice."""
    _, slices = store.list_page("resourceslices")
    out = {}
    for rs in slices:
        spec = rs.get("spec") or {}
        for d in spec.get("devices") or []:
            uid = (d.get("attributes") or {}).get("uuid") or (d.get("attributes") or {}).get(f"{DRIVER}/uuid")
            if isinstance(uid, Mapping) and uid.get("string"):
                out[(spec.get("driver"), (spec.get("pool") or {}).get("name"), d.get("name"))] = uid["string"]
    return out


def container_results(store, pod: Mapping[str, Any], container: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The allocation results a container is given."""
    out: list[Mapping[str, Any]] = []
    for ref in ((container.get("resources") or {}).get("claims")) or []:
        out += _results(_claim_for(store, pod, ref.get("name")), ref.get("request"))
    ext = (pod.get("status") or {}).get("extendedResourceClaimStatus") or {}
    mine = [m.get("requestName") for m in ext.get("requestMappings") or [] if m.get("containerName") == container.get("name")]
    if mine and ext.get("resourceClaimName"):
        claim = _get_claim(store, (pod.get("metadata") or {}).get("namespace"), ext["resourceClaimName"])
        for request in mine:
            out += _results(claim, request)
    return out


def container_env(store, pod: Mapping[str, Any], container: Mapping[str, Any]) -> dict[str, str]:
    """``NVIDIA_VISIBLE_DEVICES`` for the container's ``gpu.nvidia.com`` devices (empty when none)."""
    results = [r for r in container_results(store, pod, container) if r.get("driver") == DRIVER]
    if not results:
        return {}
    index = _uuid_index(store)
    ids = [index.get((r.get("driver"), r.get("pool"), r.get("device")), "") for r in results]
    return {NVIDIA_ENV: ",".join(i for i in ids if i)}


def merge_env(device_plugin: Mapping[str, str], dra: Mapping[str, str]) -> dict[str, str]:
    """Both paths' devices in one ``NVIDIA_VISIBLE_DEVICES`` (device plugin's first)."""
    out = dict(device_plugin)
    for k, v in dra.items():
        out[k] = f"{out[k]},{v}" if out.get(k) and v else (v or out.get(k, ""))
    return out
