"""A container's environment and the downward API's values, as the kubelet computes them.  Pure.
Design notes: docs/simulated-nodes.md.
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable, Mapping

from .. import pod_resources

__all__ = ["ConfigError", "expand", "field_value", "resource_value", "container_env", "go_quote", "Lookup"]

# (plural, name) -> the object's data as text (Secrets decoded), or None when it does not exist
Lookup = Callable[[str, str], "dict[str, str] | None"]

_VAR_REF = re.compile(r"\$\$|\$\(([-._a-zA-Z][-._a-zA-Z0-9]*)\)")


class ConfigError(Exception):
    """CreateContainerConfigError: an env source that does not exist."""


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: ``$$`` is a literal ``$``; an unknown ``$(VAR)`` stays."""
    def sub(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))
    return _VAR_REF.sub(sub, text)


def go_quote(s: str) -> str:
    """Go's ``%q`` of a string (``strconv.Quote``)."""
    out = ['"']
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch in "\a\b\f\n\r\t\v":
            out.append("\\" + "abfnrtv"["\a\b\f\n\r\t\v".index(ch)])
        elif ch.isprintable():
            out.append(ch)
        elif ord(ch) < 0x80:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) < 0x10000:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    return "".join(out) + '"'


def _format_map(m: Mapping[str, str]) -> str:
    # fieldpath.FormatMap: sorted `key="value"` lines
    return "\n".join(f"{k}={go_quote(str(m[k]))}" for k in sorted(m))


def field_value(pod: Mapping[str, Any], path: str, *, pod_ip: str | None = None, host_ip: str = "",
                env_var: bool = True) -> str:
    """A ``fieldRef``'s value.  Environment variables may also read ``spec.*``/``status.*``
    (``podFieldSelectorRuntimeValue``); volumes only ``metadata.*`` (``ExtractFieldPathAsString``).
    Raises ``ConfigError`` for a path neither supports."""
    meta = pod.get("metadata") or {}
    m = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
    if m:
        return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
    simple = {"metadata.name": meta.get("name", ""), "metadata.namespace": meta.get("namespace", ""),
              "metadata.uid": meta.get("uid", "")}
    if path in simple:
        return str(simple[path])
    if path in ("metadata.labels", "metadata.annotations"):
        return _format_map(meta.get(path.split(".")[1]) or {})
    spec = pod.get("spec") or {}
    runtime = {"spec.nodeName": spec.get("nodeName", ""),
               "spec.serviceAccountName": spec.get("serviceAccountName", ""),
               "status.hostIP": host_ip, "status.hostIPs": host_ip,
               "status.podIP": pod_ip or "", "status.podIPs": pod_ip or ""}
    if env_var and path in runtime:
        return str(runtime[path])
    raise ConfigError(f"unsupported fieldPath: {path}")


def resource_value(container: Mapping[str, Any], ref: Mapping[str, Any],
                   node_allocatable: Mapping[str, Any]) -> str:
    """A ``resourceFieldRef``'s value: ``ceil(value / divisor)``; an unset limit is the node's
    allocatable (``MergeContainerResourceLimits``), an unset request 0."""
    resource = str(ref.get("resource", ""))
    kind, _, name = resource.partition(".")
    if kind not in ("limits", "requests") or not name:
        raise ConfigError(f"unsupported container resource : {resource}")
    raw = ((container.get("resources") or {}).get(kind) or {}).get(name)
    if raw is None and kind == "limits":
        raw = node_allocatable.get(name)
    value = pod_resources.parse_quantity(raw if raw is not None else "0")
    divisor = pod_resources.parse_quantity(ref.get("divisor") or "1")
    if divisor == 0:
        divisor = pod_resources.parse_quantity("1")
    return str(math.ceil(value / divisor))


def _from_sources(spec: Mapping[str, Any], env: dict[str, str], lookup: Lookup, namespace: str) -> None:
    for src in spec.get("envFrom") or []:
        prefix = src.get("prefix") or ""
        for plural, kind, ref in (("configmaps", "configmap", src.get("configMapRef")),
                                  ("secrets", "secret", src.get("secretRef"))):
            if not ref:
                continue
            data = lookup(plural, ref.get("name", ""))
            if data is None:
                if ref.get("optional"):
                    continue
                raise ConfigError(f'{kind} "{ref.get("name", "")}" not found')
            env.update({prefix + k: v for k, v in data.items()})


def _key_ref(vf: Mapping[str, Any], lookup: Lookup, namespace: str) -> str | None:
    plural, kind, ref = (("configmaps", "ConfigMap", vf["configMapKeyRef"]) if "configMapKeyRef" in vf
                         else ("secrets", "Secret", vf["secretKeyRef"]))
    name, key, optional = ref.get("name", ""), ref.get("key"), bool(ref.get("optional"))
    data = lookup(plural, name)
    if data is None:
        if optional:
            return None
        raise ConfigError(f'{kind.lower()} "{name}" not found')
    if key not in data:
        if optional:
            return None
        raise ConfigError(f"couldn't find key {key} in {kind} {namespace}/{name}")
    return data[key]


def container_env(pod: Mapping[str, Any], spec: Mapping[str, Any], *, base: Mapping[str, str], lookup: Lookup,
                  pod_ip: str | None, host_ip: str, node_allocatable: Mapping[str, Any]) -> dict[str, str]:
    """``base`` (what the runtime sets), then ``envFrom``, then ``env`` in order."""
    namespace = (pod.get("metadata") or {}).get("namespace") or "default"
    env = dict(base)
    _from_sources(spec, env, lookup, namespace)
    for item in spec.get("env") or []:
        name = item.get("name")
        if "value" in item or "valueFrom" not in item:
            env[name] = expand(str(item.get("value") or ""), env)
            continue
        vf = item["valueFrom"] or {}
        if "fieldRef" in vf:
            env[name] = field_value(pod, (vf["fieldRef"] or {}).get("fieldPath", ""), pod_ip=pod_ip,
                                    host_ip=host_ip)
        elif "resourceFieldRef" in vf:
            env[name] = resource_value(spec, vf["resourceFieldRef"] or {}, node_allocatable)
        elif "configMapKeyRef" in vf or "secretKeyRef" in vf:
            value = _key_ref(vf, lookup, namespace)
            if value is not None:
                env[name] = value
    return env
