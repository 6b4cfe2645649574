"""Field validation the real API server runs, with its messages: each function returns causes.
Design notes: docs/simulated-apiserver.md.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

from .selectors import validate_label_value, validate_qualified_name

__all__ = ["Cause", "TOTAL_ANNOTATION_SIZE_LIMIT", "annotations", "owner_references", "finalizers", "taints",
           "tolerations", "go_quote", "not_supported"]

Cause = tuple[str, str, str]
TOTAL_ANNOTATION_SIZE_LIMIT = 256 * (1 << 10)  # TotalAnnotationSizeLimitB
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def go_quote(value: Any) -> str:
    """A value as ``field.Error`` prints it: strings %q, numbers and bools %v."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bool):
        return "true" if value else "false"
    return "null" if value is None else str(value)


def invalid(path: str, value: Any, detail: str) -> Cause:
    return ("FieldValueInvalid", path, f"Invalid value: {go_quote(value)}: {detail}")


def required(path: str) -> Cause:
    return ("FieldValueRequired", path, "Required value")


def not_supported(path: str, value: Any, allowed: Iterable[str]) -> Cause:
    listed = ", ".join(json.dumps(a) for a in allowed)
    return ("FieldValueNotSupported", path, f"Unsupported value: {go_quote(value)}: supported values: {listed}")


def annotations(values: Any, path: str = "metadata.annotations") -> list[Cause]:
    """``ValidateAnnotations``: qualified-name keys, at most 256 KiB of keys and values together."""
    if values is None:
        return []
    if not isinstance(values, dict):
        return [("FieldValueInvalid", path, "Invalid value: must be an object")]
    out = [invalid(path, k, m) for k in values for m in validate_qualified_name(str(k))]
    out += [("FieldValueInvalid", f"{path}[{k}]", "Invalid value: must be a string")
            for k, v in values.items() if not isinstance(v, str)]
    size = sum(len(str(k).encode()) + len(str(v).encode()) for k, v in values.items())
    if size > TOTAL_ANNOTATION_SIZE_LIMIT:
        out.append(("FieldValueTooLong", path, f"Too long: may not be more than {TOTAL_ANNOTATION_SIZE_LIMIT} bytes"))
    return out


def _version_of(api_version: str) -> str:
    return api_version.rsplit("/", 1)[-1] if api_version else ""


def owner_references(refs: Any, path: str = "metadata.ownerReferences") -> list[Cause]:
    """``ValidateOwnerReferences``: every field set, at most one controller (the path is not indexed)."""
    if refs is None:
        return []
    if not isinstance(refs, list):
        return [("FieldValueInvalid", path, "Invalid value: must be a list")]
    out: list[Cause] = []
    first_controller = ""
    for ref in refs:
        if not isinstance(ref, dict):
            out.append(("FieldValueInvalid", path, "Invalid value: must be an object"))
            continue
        if not _version_of(str(ref.get("apiVersion") or "")):
            out.append(invalid(f"{path}.apiVersion", ref.get("apiVersion") or "", "version must not be empty"))
        for key in ("kind", "name", "uid"):
            if not ref.get(key):
                out.append(invalid(f"{path}.{key}", ref.get(key) or "", "must not be empty"))
        if ref.get("controller") is True:
            current = f"{ref.get('kind')}/{ref.get('name')}"
            if first_controller:
                out.append(("FieldValueInvalid", path,
                            f"Invalid value: {_go_owner_refs(refs)}: Only one reference can have Controller set "
                            f'to true. Found "true" in references for {first_controller} and {current}'))
            else:
                first_controller = current
    return out


def finalizers(values: Any, path: str = "metadata.finalizers") -> list[Cause]:
    """``ValidateFinalizers``: qualified names, not both ``orphan`` and ``foregroundDeletion``."""
    if values is None:
        return []
    if not isinstance(values, list):
        return [("FieldValueInvalid", path, "Invalid value: must be a list of strings")]
    out = [invalid(path, f, m) for f in values for m in validate_qualified_name(str(f))]
    if "orphan" in values and "foregroundDeletion" in values:
        listed = ", ".join(go_quote(str(f)) for f in values)
        out.append(("FieldValueInvalid", path,
                    f"Invalid value: []string{{{listed}}}: finalizer orphan and foregroundDeletion cannot be both set"))
    return out


def _go_taint(t: dict[str, Any]) -> str:
    added = _go_pointer(t.get("timeAdded"), "v1.Time")
    return (f'core.Taint{{Key:{go_quote(str(t.get("key") or ""))}, Value:{go_quote(str(t.get("value") or ""))}, '
            f'Effect:{go_quote(str(t.get("effect") or ""))}, TimeAdded:{added}}}')


def _go_pointer(value: Any, go_type: str) -> str:
    # %#v of a pointer field: nil, or an address (which varies on a real server)
    return f"(*{go_type})(nil)" if value is None else f"(*{go_type})(0xc000000000)"


def _go_owner_refs(refs: list[Any]) -> str:
    items = [f'v1.OwnerReference{{APIVersion:{go_quote(str(r.get("apiVersion") or ""))}, '
             f'Kind:{go_quote(str(r.get("kind") or ""))}, Name:{go_quote(str(r.get("name") or ""))}, '
             f'UID:{go_quote(str(r.get("uid") or ""))}, Controller:{_go_pointer(r.get("controller"), "bool")}, '
             f'BlockOwnerDeletion:{_go_pointer(r.get("blockOwnerDeletion"), "bool")}}}'
             for r in refs if isinstance(r, dict)]
    return "[]v1.OwnerReference{" + ", ".join(items) + "}"


def _go_toleration(t: dict[str, Any]) -> str:
    return (f'core.Toleration{{Key:{go_quote(str(t.get("key") or ""))}, '
            f'Operator:{go_quote(str(t.get("operator") or ""))}, Value:{go_quote(str(t.get("value") or ""))}, '
            f'Effect:{go_quote(str(t.get("effect") or ""))}, '
            f'TolerationSeconds:{_go_pointer(t.get("tolerationSeconds"), "int64")}}}')


def _effect(path: str, effect: Any, allow_empty: bool) -> list[Cause]:
    """``validateTaintEffect``."""
    if not effect:
        return [] if allow_empty else [required(path)]
    return [] if effect in TAINT_EFFECTS else [not_supported(path, effect, TAINT_EFFECTS)]


def taints(values: Any, path: str = "spec.taints") -> list[Cause]:
    """``validateNodeTaints``: key a qualified name, value a label value, a known effect,
    unique by key and effect."""
    if values is None:
        return []
    if not isinstance(values, list):
        return [("FieldValueInvalid", path, "Invalid value: must be a list of {key, value, effect}")]
    out: list[Cause] = []
    seen: set[tuple[str, str]] = set()
    for i, t in enumerate(values):
        p = f"{path}[{i}]"
        if not isinstance(t, dict):
            out.append(("FieldValueInvalid", p, "Invalid value: must be an object with key, value and effect"))
            continue
        key, value = str(t.get("key") or ""), t.get("value") or ""
        out += [invalid(f"{p}.key", key, m) for m in validate_qualified_name(key)]
        if not isinstance(value, str):
            out.append(invalid(f"{p}.value", str(value), "must be a string"))
        else:
            errs = validate_label_value(value)
            if errs:
                out.append(invalid(f"{p}.value", value, ";".join(errs)))
        out += _effect(f"{p}.effect", t.get("effect"), False)
        pair = (key, str(t.get("effect") or ""))
        if pair in seen:
            out.append(("FieldValueDuplicate", p,
                        f"Duplicate value: {_go_taint(t)}: taints must be unique by key and effect pair"))
        seen.add(pair)
    return out


def tolerations(values: Any, path: str = "spec.tolerations") -> list[Cause]:
    """``ValidateTolerations`` (an invalid value is reported on ``operator``, as the real one does)."""
    if values is None:
        return []
    if not isinstance(values, list):
        return [("FieldValueInvalid", path, "Invalid value: must be a list")]
    out: list[Cause] = []
    for i, t in enumerate(values):
        p = f"{path}[{i}]"
        if not isinstance(t, dict):
            out.append(("FieldValueInvalid", p, "Invalid value: must be an object"))
            continue
        key, op, value = str(t.get("key") or ""), t.get("operator") or "", t.get("value") or ""
        if key:
            out += [invalid(f"{p}.key", key, m) for m in validate_qualified_name(key)]
        elif op != "Exists":
            out.append(invalid(f"{p}.operator", op, 'operator must be Exists when `key` is empty, which means '
                                                    '"match all values and all keys"'))
        if t.get("tolerationSeconds") is not None and t.get("effect") != "NoExecute":
            out.append(invalid(f"{p}.effect", t.get("effect") or "",
                               "effect must be 'NoExecute' when `tolerationSeconds` is set"))
        if op in ("Equal", ""):
            errs = validate_label_value(str(value))
            if errs:
                out.append(invalid(f"{p}.operator", str(value), ";".join(errs)))
        elif op == "Exists":
            if value:
                out.append(("FieldValueInvalid", f"{p}.operator",
                            f"Invalid value: {_go_toleration(t)}: value must be empty when `operator` is 'Exists'"))
        else:
            out.append(not_supported(f"{p}.operator", op, ("Equal", "Exists")))
        out += _effect(f"{p}.effect", t.get("effect"), True)
    return out
