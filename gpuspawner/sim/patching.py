"""The three PATCH formats of kube-apiserver, on plain JSON dicts.
Design notes: docs/simulated-apiserver.md.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonpatch

__all__ = [
    "MERGE_PATCH",
    "STRATEGIC_MERGE_PATCH",
    "JSON_PATCH",
    "APPLY_PATCH",
    "PATCH_TYPES",
    "PatchError",
    "apply_patch",
    "json_merge_patch",
    "strategic_merge_patch",
]

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
# The order of the real 415 message (staging/.../endpoints/handlers/patch.go).
PATCH_TYPES = (JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH)


class PatchError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# patchMergeKey of the core/v1 list fields that use patchStrategy "merge"
# (k8s.io/api/core/v1/types.go struct tags).  A field absent here is replaced
# as a whole, which is the real behaviour for e.g. tolerations, taints,
# envFrom, containerStatuses and args: they carry no patchStrategy tag.
_MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "conditions": "type",  # PodStatus, NodeStatus, PVCStatus, NamespaceStatus
    "addresses": "type",  # NodeStatus.addresses
    "ownerReferences": "uid",
    "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name",
    "schedulingGates": "name",
    "podIPs": "ip",
    "hostIPs": "ip",
    # "ports" is handled by _merge_key_for: containerPort for a container's
    # ports, port for a Service's.
}
# Primitive lists with patchStrategy "merge": a union, not a replacement.
_PRIMITIVE_MERGE = {"finalizers"}

_DIRECTIVE = "$patch"
_ORDER_PREFIX = "$setElementOrder/"
_DELETE_PRIMITIVE_PREFIX = "$deleteFromPrimitiveList/"
_RETAIN_KEYS = "$retainKeys"


def json_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 section 2 ``MergePatch`` (null removes a member)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = json_merge_patch(result.get(key), value)
    return result


def _merge_key_for(field: str, original: list[Any], patch: list[Any]) -> str | None:
    if field == "ports":
        for item in (*patch, *original):
            if isinstance(item, dict) and "containerPort" in item:
                return "containerPort"
        return "port"
    return _MERGE_KEYS.get(field)


def strategic_merge_patch(original: Any, patch: Any) -> Any:
    """Apply a strategic merge patch to ``original`` (neither is modified)."""
    if not isinstance(patch, dict):
        raise PatchError(400, "strategic merge patch must be a JSON object")
    return _merge_map(original if isinstance(original, dict) else {}, patch)


def _merge_map(original: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any] | None:
    directive = patch.get(_DIRECTIVE)
    if directive == "delete":
        return None
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != _DIRECTIVE}
    if directive not in (None, "merge"):
        raise PatchError(422, f"Unknown patch type: {directive} in map: {json.dumps(patch)}")
    result = dict(original)
    retain = patch.get(_RETAIN_KEYS)
    orders: dict[str, list[Any]] = {}
    for key, value in patch.items():
        if key in (_DIRECTIVE, _RETAIN_KEYS):
            continue
        if key.startswith(_ORDER_PREFIX):
            if not isinstance(value, list):
                raise PatchError(400, f"{key} must be a list")
            orders[key[len(_ORDER_PREFIX) :]] = value
            continue
        if key.startswith(_DELETE_PRIMITIVE_PREFIX):
            field = key[len(_DELETE_PRIMITIVE_PREFIX) :]
            if not isinstance(value, list):
                raise PatchError(400, f"{key} must be a list")
            current = result.get(field)
            if isinstance(current, list):
                result[field] = [v for v in current if v not in value]
            continue
        if value is None:
            result.pop(key, None)
            continue
        current = result.get(key)
        if isinstance(value, dict):
            merged = _merge_map(current if isinstance(current, dict) else {}, value)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list):
            result[key] = _merge_list(key, current if isinstance(current, list) else [], value)
        else:
            result[key] = copy.deepcopy(value)
    for field, order in orders.items():
        if isinstance(result.get(field), list):
            result[field] = _apply_order(field, result[field], order)
    if isinstance(retain, list):
        keep = set(retain)
        result = {k: v for k, v in result.items() if k in keep}
    return result


def _merge_list(field: str, original: list[Any], patch: list[Any]) -> list[Any]:
    # A list-level "$patch: replace" element replaces the whole list.
    if any(isinstance(p, dict) and p.get(_DIRECTIVE) == "replace" and len(p) == 1 for p in patch):
        return [copy.deepcopy(p) for p in patch if not (isinstance(p, dict) and _DIRECTIVE in p)]
    if field in _PRIMITIVE_MERGE:
        out = list(original)
        for v in patch:
            if v not in out:
                out.append(copy.deepcopy(v))
        return out
    key = _merge_key_for(field, original, patch)
    if key is None or not all(isinstance(p, dict) for p in patch):
        return copy.deepcopy(patch)
    out = [copy.deepcopy(o) for o in original]
    for item in patch:
        directive = item.get(_DIRECTIVE)
        if key not in item:
            raise PatchError(422, f"map: {json.dumps(item)} does not contain declared merge key: {key}")
        idx = next(
            (i for i, o in enumerate(out) if isinstance(o, dict) and o.get(key) == item[key]),
            None,
        )
        if directive == "delete":
            if idx is not None:
                out.pop(idx)
            continue
        if idx is None:
            out.append({k: copy.deepcopy(v) for k, v in item.items() if k != _DIRECTIVE})
        else:
            merged = _merge_map(out[idx], item)
            if merged is None:
                out.pop(idx)
            else:
                out[idx] = merged
    return out


def _apply_order(field: str, items: list[Any], order: list[Any]) -> list[Any]:
    key = _merge_key_for(field, items, order)
    if key is None:
        if all(not isinstance(o, dict) for o in order):
            rank = {json.dumps(v): i for i, v in enumerate(order)}
            return sorted(items, key=lambda v: rank.get(json.dumps(v), len(rank)))
        return items
    rank = {json.dumps(o.get(key)): i for i, o in enumerate(order) if isinstance(o, dict)}
    indexed = list(enumerate(items))
    indexed.sort(
        key=lambda p: (
            rank.get(json.dumps(p[1].get(key)) if isinstance(p[1], dict) else "", len(rank)),
            p[0],
        )
    )
    return [item for _, item in indexed]


def apply_patch(original: dict[str, Any], body: bytes | str | Any, content_type: str) -> dict[str, Any]:
    """Return ``original`` with the patch ``body`` applied (``original`` unchanged).

    ``body`` may be raw bytes/str (decoded as JSON) or already-decoded JSON.
    """
    ctype = (content_type or "").split(";", 1)[0].strip().lower()
    if ctype not in PATCH_TYPES:
        raise PatchError(
            415,
            "the body of the request was in an unknown format - accepted media types include: "
            + ", ".join(PATCH_TYPES),
        )
    if isinstance(body, (bytes, bytearray, str)):
        try:
            patch = json.loads(body)
        except ValueError as e:
            raise PatchError(400, f"error decoding patch: {e}") from None
    else:
        patch = body
    if ctype == JSON_PATCH:
        if not isinstance(patch, list):
            raise PatchError(
                400,
                "json: cannot unmarshal object into Go value of type jsonpatch.Patch",
            )
        try:
            result = jsonpatch.apply_patch(original, patch, in_place=False)
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as e:
            raise PatchError(422, str(e)) from None
        except (TypeError, KeyError, AttributeError) as e:
            raise PatchError(400, f"invalid JSON patch: {e}") from None
    elif ctype == MERGE_PATCH:
        if not isinstance(patch, dict):
            raise PatchError(400, "merge patch must be a JSON object")
        result = json_merge_patch(original, patch)
    else:
        result = strategic_merge_patch(original, patch)
    if not isinstance(result, dict):
        raise PatchError(422, "the patch did not produce a JSON object")
    return result
