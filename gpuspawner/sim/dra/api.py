"""``resource.k8s.io/v1`` objects: names, defaulting and validation, as the API server applies them.  Pure.
Design notes: docs/simulated-cluster.md.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Iterable, Mapping

from testcluster.node.pod_resources import QuantityError, parse_quantity
from ..selectors import validate_qualified_name
from .semver import SemverError, parse

GROUP = "resource.k8s.io"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"
DEVICE_CLASSES, RESOURCE_SLICES = "deviceclasses", "resourceslices"
RESOURCE_CLAIMS, RESOURCE_CLAIM_TEMPLATES = "resourceclaims", "resourceclaimtemplates"
PLURALS = (DEVICE_CLASSES, RESOURCE_SLICES, RESOURCE_CLAIMS, RESOURCE_CLAIM_TEMPLATES)

# types.go constants
FINALIZER = "resource.kubernetes.io/delete-protection"
POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
EXTENDED_RESOURCE_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
IMPLICIT_EXTENDED_RESOURCE_PREFIX = "deviceclass.resource.kubernetes.io/"
EXACT_COUNT, ALL = "ExactCount", "All"
RESOURCE_SLICE_MAX_DEVICES = 128
DEVICE_REQUESTS_MAX = 32
RESERVED_FOR_MAX = 256
ALLOCATION_RESULTS_MAX = 32
CEL_EXPRESSION_MAX_LENGTH = 10 * 1024

Cause = tuple[str, str, str]  # (reason, field, message), as errors.invalid takes them

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
              "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
              "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
_SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                  "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
                  "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
_C_IDENTIFIER_MSG = ("a valid C identifier must start with alphabetic character or '_', followed by a string of "
                     "alphanumeric characters or '_' (e.g. 'my_name',  or 'MY_NAME',  or 'MyName', regex used for "
                     "validation is '[A-Za-z_][A-Za-z0-9_]*')")


def _q(value: Any) -> str:
    """How field.Invalid prints a value: strings quoted, numbers plain."""
    return json.dumps(value) if isinstance(value, str) else str(value).lower() if isinstance(value, bool) \
        else str(value)


def required(path: str, detail: str = "") -> Cause:
    return ("FieldValueRequired", path, "Required value" + (f": {detail}" if detail else ""))


def invalid(path: str, value: Any, detail: str) -> Cause:
    shown = "null" if value is None else _q(value)
    return ("FieldValueInvalid", path, f"Invalid value: {shown}: {detail}")


def _dns_label(value: Any, path: str) -> list[Cause]:
    if not isinstance(value, str) or not value:
        return [required(path)]
    if len(value) > 63:
        return [invalid(path, value, "must be no more than 63 characters")]
    return [] if _DNS1123_LABEL.fullmatch(value) else [invalid(path, value, _LABEL_MSG)]


def _dns_subdomain(value: Any, path: str, max_len: int = 253) -> list[Cause]:
    if not isinstance(value, str) or not value:
        return [required(path)]
    if len(value) > max_len:
        return [invalid(path, value, f"must be no more than {max_len} characters")]
    return [] if _DNS1123_SUBDOMAIN.fullmatch(value) else [invalid(path, value, _SUBDOMAIN_MSG)]


def _driver_name(value: Any, path: str) -> list[Cause]:
    """``ValidateCSIDriverName``: a DNS subdomain of at most 63 characters."""
    return _dns_subdomain(value, path, 63)


def _set(items: Any, max_size: int, path: str, key: Callable[[Any], Any],
         each: Callable[[Any, str], list[Cause]]) -> list[Cause]:
    """``validateSet``: a list of at most ``max_size`` valid items without duplicate keys."""
    if items is None:
        return []
    if not isinstance(items, list):
        return [invalid(path, None, "must be a list")]
    if max_size >= 0 and len(items) > max_size:
        return [("FieldValueTooMany", path, f"Too many: {len(items)}: must have at most {max_size} items")]
    out: list[Cause] = []
    seen: set = set()
    for i, item in enumerate(items):
        out += each(item, f"{path}[{i}]")
        k = key(item)
        if k in seen:
            out.append(("FieldValueDuplicate", f"{path}[{i}]", f"Duplicate value: {_q(k)}"))
        elif k is not None:
            seen.add(k)
    return out


def _name_of(item: Any) -> Any:
    return item.get("name") if isinstance(item, Mapping) else None


# --- selectors ----------------------------------------------------------------------


def validate_selectors(selectors: Any, path: str) -> list[Cause]:
    """Each selector needs ``cel.expression`` that compiles in DRA's CEL environment."""
    def one(sel: Any, p: str) -> list[Cause]:
        cel = sel.get("cel") if isinstance(sel, Mapping) else None
        if not isinstance(cel, Mapping):
            return [required(f"{p}.cel")]
        expr = cel.get("expression")
        if not isinstance(expr, str) or not expr:
            return [required(f"{p}.cel.expression")]
        if len(expr) > CEL_EXPRESSION_MAX_LENGTH:
            return [("FieldValueTooLong", f"{p}.cel.expression",
                     f"Too long: may not be more than {CEL_EXPRESSION_MAX_LENGTH} bytes")]
        from . import cel_environment  # cel-python loads only when a selector is checked

        try:
            cel_environment.compile_expression(expr)
        except cel_environment.CelCompileError as e:
            return [invalid(f"{p}.cel.expression", expr, str(e))]
        return []
    return _set(selectors, 32, path, lambda s: None, one)


# --- claims and templates -------------------------------------------------------------


def default_request(req: dict[str, Any]) -> None:
    """``SetDefaults_ExactDeviceRequest`` / ``SetDefaults_DeviceSubRequest``."""
    targets = [req.get("exactly")] + list(req.get("firstAvailable") or [])
    for t in targets:
        if isinstance(t, dict):
            t.setdefault("allocationMode", EXACT_COUNT)
            if t["allocationMode"] == EXACT_COUNT and t.get("count") in (None, 0):
                t["count"] = 1


def default_claim_spec(spec: Any) -> None:
    devices = spec.get("devices") if isinstance(spec, dict) else None
    for req in (devices or {}).get("requests") or []:
        if isinstance(req, dict):
            default_request(req)


def _allocation_mode(t: Mapping[str, Any], path: str) -> list[Cause]:
    mode, count = t.get("allocationMode"), t.get("count")
    if mode == ALL:
        if count not in (None, 0):
            return [invalid(f"{path}.count", count, "must not be specified when allocationMode is 'All'")]
        return []
    if mode == EXACT_COUNT:
        if not isinstance(count, int) or isinstance(count, bool) or count <= 0:
            return [invalid(f"{path}.count", count, "must be greater than zero")]
        return []
    return [("FieldValueNotSupported", f"{path}.allocationMode",
             f'Unsupported value: {_q(mode)}: supported values: "All", "ExactCount"')]


def _device_selection(t: Any, path: str) -> list[Cause]:
    """What ``exactly`` and a ``firstAvailable`` entry share: class, selectors, mode and count."""
    if not isinstance(t, Mapping):
        return [invalid(path, None, "must be an object")]
    cls = t.get("deviceClassName")
    out = [required(f"{path}.deviceClassName")] if not cls else _dns_subdomain(cls, f"{path}.deviceClassName")
    out += validate_selectors(t.get("selectors"), f"{path}.selectors")
    return out + _allocation_mode(t, path)


def _request(req: Any, path: str) -> list[Cause]:
    if not isinstance(req, Mapping):
        return [invalid(path, None, "must be an object")]
    out = _dns_label(req.get("name"), f"{path}.name")
    exactly, first = req.get("exactly"), req.get("firstAvailable")
    if exactly is None and not first:
        out.append(required(path, "exactly one of `exactly` or `firstAvailable` is required"))
    elif exactly is not None and first:
        out.append(invalid(path, None, "exactly one of `exactly` or `firstAvailable` is required, "
                                       "but multiple fields are set"))
    elif exactly is not None:
        out += _device_selection(exactly, f"{path}.exactly")
    else:
        def sub(s: Any, p: str) -> list[Cause]:
            named = _dns_label(_name_of(s), f"{p}.name") if isinstance(s, Mapping) else []
            return named + _device_selection(s, p)
        out += _set(first, 8, f"{path}.firstAvailable", _name_of, sub)
    return out


def _request_names(requests: Iterable[Any]) -> set[str]:
    names: set[str] = set()
    for r in requests:
        if not isinstance(r, Mapping):
            continue
        names.add(str(r.get("name")))
        for s in r.get("firstAvailable") or []:
            if isinstance(s, Mapping):
                names.add(f"{r.get('name')}/{s.get('name')}")
    return names


def _request_refs(refs: Any, names: set[str], path: str) -> list[Cause]:
    def one(ref: Any, p: str) -> list[Cause]:
        if ref not in names:
            return [invalid(p, ref, "must be the name of a request in the claim or the name of a request and a "
                                    "subrequest separated by '/'")]
        return []
    return _set(refs, DEVICE_REQUESTS_MAX, path, lambda r: r, one)


def validate_claim_spec(spec: Any, path: str = "spec") -> list[Cause]:
    """``validateResourceClaimSpec``."""
    if spec is None:
        spec = {}
    if not isinstance(spec, Mapping):
        return [invalid(path, None, "must be an object")]
    devices = spec.get("devices") or {}
    if not isinstance(devices, Mapping):
        return [invalid(f"{path}.devices", None, "must be an object")]
    p = f"{path}.devices"
    requests = devices.get("requests") or []
    out = _set(requests, DEVICE_REQUESTS_MAX, f"{p}.requests", _name_of, _request)
    names = _request_names(requests if isinstance(requests, list) else [])
    for i, c in enumerate(devices.get("constraints") or []):
        cp = f"{p}.constraints[{i}]"
        if not isinstance(c, Mapping):
            out.append(invalid(cp, None, "must be an object"))
            continue
        out += _request_refs(c.get("requests"), names, f"{cp}.requests")
        attr = c.get("matchAttribute")
        if not attr:
            out.append(required(f"{cp}.matchAttribute"))
        elif "/" not in str(attr):
            out.append(invalid(f"{cp}.matchAttribute", attr,
                               "a fully qualified name must be a domain and a name separated by a slash"))
    for i, c in enumerate(devices.get("config") or []):
        cp = f"{p}.config[{i}]"
        if not isinstance(c, Mapping):
            out.append(invalid(cp, None, "must be an object"))
            continue
        out += _request_refs(c.get("requests"), names, f"{cp}.requests")
        out += _opaque(c.get("opaque"), f"{cp}.opaque")
    return out


def _opaque(opaque: Any, path: str) -> list[Cause]:
    if not isinstance(opaque, Mapping):
        return [required(path)]
    out = _driver_name(opaque.get("driver"), f"{path}.driver")
    if not isinstance(opaque.get("parameters"), Mapping):
        out.append(required(f"{path}.parameters"))
    return out


def validate_claim_status(status: Any, old_status: Any, requests: Iterable[Any], deleting: bool) -> list[Cause]:
    """``validateResourceClaimStatusUpdate``: reservations need an allocation; an allocation,
    once set, can be removed but not rewritten."""
    status = status if isinstance(status, Mapping) else {}
    old_status = old_status if isinstance(old_status, Mapping) else {}
    out: list[Cause] = []
    reserved = status.get("reservedFor") or []

    def consumer(ref: Any, p: str) -> list[Cause]:
        ref = ref if isinstance(ref, Mapping) else {}
        return [required(f"{p}.{k}") for k in ("resource", "name", "uid") if not ref.get(k)]
    out += _set(reserved, RESERVED_FOR_MAX, "status.reservedFor",
                lambda r: r.get("uid") if isinstance(r, Mapping) else None, consumer)
    alloc, old_alloc = status.get("allocation"), old_status.get("allocation")
    if reserved and not alloc:
        out.append(("FieldValueForbidden", "status.reservedFor",
                    "Forbidden: may not be specified when `allocated` is not set"))
    if reserved and alloc and deleting:
        old_uids = {r.get("uid") for r in old_status.get("reservedFor") or [] if isinstance(r, Mapping)}
        if any(isinstance(r, Mapping) and r.get("uid") not in old_uids for r in reserved):
            out.append(("FieldValueForbidden", "status.reservedFor",
                        "Forbidden: new entries may not be added while `deallocationRequested` or "
                        "`deletionTimestamp` are set"))
    if alloc and old_alloc and alloc != old_alloc:
        out.append(invalid("status.allocation", None, "field is immutable"))
    elif alloc and not old_alloc:
        out += _allocation(alloc, _request_names(requests))
    return out


def _allocation(alloc: Any, names: set[str]) -> list[Cause]:
    if not isinstance(alloc, Mapping):
        return [invalid("status.allocation", None, "must be an object")]
    results = ((alloc.get("devices") or {}).get("results")) or []
    out: list[Cause] = []
    if len(results) > ALLOCATION_RESULTS_MAX:
        return [("FieldValueTooMany", "status.allocation.devices.results",
                 f"Too many: {len(results)}: must have at most {ALLOCATION_RESULTS_MAX} items")]
    for i, r in enumerate(results):
        p = f"status.allocation.devices.results[{i}]"
        r = r if isinstance(r, Mapping) else {}
        out += _request_refs([r.get("request")], names, f"{p}.request")
        out += _driver_name(r.get("driver"), f"{p}.driver")
        out += [required(f"{p}.pool")] if not r.get("pool") else []
        out += _dns_label(r.get("device"), f"{p}.device")
    return out


# --- device classes -------------------------------------------------------------------


def _is_extended_resource_name(name: str) -> bool:
    """``IsExtendedResourceName``: a qualified name outside ``kubernetes.io``, not ``requests.*``."""
    if "/" not in name or name.startswith("requests."):
        return False
    domain = name.split("/", 1)[0]
    if domain == "kubernetes.io" or domain.endswith(".kubernetes.io"):
        return False
    return not validate_qualified_name("requests." + name)


def validate_device_class_spec(spec: Any) -> list[Cause]:
    spec = spec if isinstance(spec, Mapping) else {}
    out = validate_selectors(spec.get("selectors"), "spec.selectors")
    for i, c in enumerate(spec.get("config") or []):
        out += _opaque((c or {}).get("opaque") if isinstance(c, Mapping) else None, f"spec.config[{i}].opaque")
    ext = spec.get("extendedResourceName")
    if ext is not None and (not isinstance(ext, str) or not _is_extended_resource_name(ext)):
        out.append(invalid("spec.extendedResourceName", ext, "must be a valid extended resource name"))
    return out


# --- resource slices -----------------------------------------------------------------


def _attribute(name: str, value: Any, path: str) -> list[Cause]:
    if not isinstance(value, Mapping):
        return [invalid(path, "", "exactly one value must be specified")]
    kinds = [k for k in ("bool", "int", "string", "version") if k in value]
    if len(kinds) != 1:
        return [invalid(path, "" if not kinds else value, "exactly one value must be specified")]
    kind, v = kinds[0], value[kinds[0]]
    type_ok = {"bool": lambda x: isinstance(x, bool), "int": lambda x: isinstance(x, int) and not isinstance(x, bool),
               "string": lambda x: isinstance(x, str), "version": lambda x: isinstance(x, str)}[kind]
    if not type_ok(v):
        return [invalid(f"{path}.{kind}", v, f"must be a {kind}")]
    if kind in ("string", "version") and len(v) > 64:
        return [("FieldValueTooLong", f"{path}.{kind}", "Too long: may not be more than 64 bytes")]
    if kind == "version":
        try:
            if str(parse(v)) != v:
                raise SemverError("not minimal")
        except SemverError:
            return [invalid(f"{path}.version", v, "must be a string compatible with semver.org spec 2.0.0")]
    return []


def _qualified_name(name: str, path: str) -> list[Cause]:
    domain, slash, ident = name.rpartition("/")
    out: list[Cause] = []
    if slash:
        out += _driver_name(domain, path) if domain else [invalid(path, "", "the domain must not be empty")]
    if not ident:
        out.append(invalid(path, "", "the name must not be empty"))
    elif len(ident) > 32:
        out.append(("FieldValueTooLong", path, "Too long: may not be more than 32 bytes"))
    elif not _C_IDENTIFIER.fullmatch(ident):
        out.append(invalid(path, ident, _C_IDENTIFIER_MSG))
    return out


def _device(device: Any, path: str) -> list[Cause]:
    if not isinstance(device, Mapping):
        return [invalid(path, None, "must be an object")]
    out = _dns_label(device.get("name"), f"{path}.name")
    attrs, caps = device.get("attributes") or {}, device.get("capacity") or {}
    if not isinstance(attrs, Mapping) or not isinstance(caps, Mapping):
        return out + [invalid(path, None, "attributes and capacity must be maps")]
    if len(attrs) + len(caps) > 32:
        out.append(invalid(path, len(attrs) + len(caps),
                           "the total number of attributes and capacities must not exceed 32"))
    for k, v in attrs.items():
        out += _qualified_name(str(k), f"{path}.attributes[{k}]") + _attribute(str(k), v, f"{path}.attributes[{k}]")
    for k, v in caps.items():
        p = f"{path}.capacity[{k}]"
        out += _qualified_name(str(k), p)
        try:
            parse_quantity(v.get("value") if isinstance(v, Mapping) else None)
        except QuantityError:
            out.append(required(f"{p}.value"))
    return out


def validate_slice_spec(spec: Any, old_spec: Any = None) -> list[Cause]:
    """``validateResourceSliceSpec`` (with the update's immutable fields)."""
    if not isinstance(spec, Mapping):
        return [required("spec")]
    out = _driver_name(spec.get("driver"), "spec.driver")
    pool = spec.get("pool") if isinstance(spec.get("pool"), Mapping) else {}
    name = pool.get("name")
    if not name:
        out.append(required("spec.pool.name"))
    else:
        for part in str(name).split("/"):
            out += _dns_subdomain(part, "spec.pool.name")
    count = pool.get("resourceSliceCount")
    if not isinstance(count, int) or isinstance(count, bool) or count <= 0:
        out.append(invalid("spec.pool.resourceSliceCount", count, "must be greater than zero"))
    gen = pool.get("generation", 0)
    if not isinstance(gen, int) or isinstance(gen, bool) or gen < 0:
        out.append(invalid("spec.pool.generation", gen, "must be greater than or equal to zero"))
    if isinstance(old_spec, Mapping):
        for field, new, old in (("spec.pool.name", name, (old_spec.get("pool") or {}).get("name")),
                                ("spec.driver", spec.get("driver"), old_spec.get("driver")),
                                ("spec.nodeName", spec.get("nodeName"), old_spec.get("nodeName"))):
            if new != old:
                out.append(invalid(field, new, "field is immutable"))
    out += _node_selection(spec)
    out += _set(spec.get("devices"), RESOURCE_SLICE_MAX_DEVICES, "spec.devices", _name_of, _device)
    return out


def _node_selection(spec: Mapping[str, Any]) -> list[Cause]:
    out: list[Cause] = []
    chosen: list[str] = []
    if "nodeName" in spec and spec["nodeName"] is not None:
        if spec["nodeName"] == "":
            out.append(invalid("spec.nodeName", "", "must be either unset or set to a non-empty string"))
        else:
            chosen.append("`nodeName`")
            out += _dns_subdomain(spec["nodeName"], "spec.nodeName")
    if spec.get("nodeSelector") is not None:
        chosen.append("`nodeSelector`")
        terms = (spec["nodeSelector"] or {}).get("nodeSelectorTerms") if isinstance(spec["nodeSelector"], Mapping) \
            else None
        if not isinstance(terms, list) or len(terms) != 1:
            out.append(invalid("spec.nodeSelector.nodeSelectorTerms", None, "must have exactly one node selector term"))
    for flag in ("allNodes", "perDeviceNodeSelection"):
        if spec.get(flag) is not None:
            if spec[flag] is True:
                chosen.append(f"`{flag}`")
            else:
                out.append(invalid(f"spec.{flag}", spec[flag], "must be either unset or set to true"))
    fields = "`nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection`"
    if not chosen:
        out.append(required("spec", f"exactly one of {fields} is required"))
    elif len(chosen) > 1:
        out.append(invalid("spec", "{" + ", ".join(chosen) + "}",
                           f"exactly one of {fields} is required, but multiple fields are set"))
    return out


# --- per kind, as the store's strategy calls them ------------------------------------


def default_spec(plural: str, obj: dict[str, Any]) -> None:
    """API defaulting, on create and on update (before validation, as the server decodes)."""
    if plural == RESOURCE_CLAIMS:
        default_claim_spec(obj.setdefault("spec", {}))
    elif plural == RESOURCE_CLAIM_TEMPLATES:
        tmpl = obj.setdefault("spec", {})
        if isinstance(tmpl, dict):
            default_claim_spec(tmpl.setdefault("spec", {}))
    elif plural == RESOURCE_SLICES:
        pool = (obj.get("spec") or {}).get("pool")
        if isinstance(pool, dict):
            pool.setdefault("generation", 0)
    elif plural == DEVICE_CLASSES:
        obj.setdefault("spec", {})


def prepare_for_create(plural: str, obj: dict[str, Any]) -> None:
    """The claim strategy's ``PrepareForCreate``: whatever status the client sent is dropped."""
    if plural == RESOURCE_CLAIMS:
        obj["status"] = {}


def validate(plural: str, obj: Mapping[str, Any], old: Mapping[str, Any] | None = None) -> list[Cause]:
    """The spec checks of ``plural`` (metadata is checked by the store for every kind)."""
    spec = obj.get("spec")
    if plural == DEVICE_CLASSES:
        return validate_device_class_spec(spec)
    if plural == RESOURCE_SLICES:
        return validate_slice_spec(spec, (old or {}).get("spec") if old else None)
    if plural in (RESOURCE_CLAIMS, RESOURCE_CLAIM_TEMPLATES):
        if old is not None and spec != old.get("spec"):
            return [invalid("spec", None, "field is immutable")]
        if plural == RESOURCE_CLAIMS:
            return validate_claim_spec(spec)
        tmpl = spec if isinstance(spec, Mapping) else {}
        return validate_claim_spec(tmpl.get("spec"), "spec.spec")
    return []


def validate_status(plural: str, obj: Mapping[str, Any], old: Mapping[str, Any]) -> list[Cause]:
    if plural != RESOURCE_CLAIMS:
        return []
    requests = ((obj.get("spec") or {}).get("devices") or {}).get("requests") or []
    deleting = bool((obj.get("metadata") or {}).get("deletionTimestamp"))
    return validate_claim_status(obj.get("status"), old.get("status"), requests, deleting)
