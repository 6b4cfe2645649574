"""Quantities and a pod's resource requests, counted as the kube-scheduler counts them.  Pure.
Design notes: docs/simulated-nodes.md.
"""

from __future__ import annotations

import functools
import math
import re
from decimal import Decimal, InvalidOperation
from typing import Any, Mapping

# ---------------------------------------------------------------------------
# quantities (k8s.io/apimachinery/pkg/api/resource/quantity.go)
# ---------------------------------------------------------------------------

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
            "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
            "P": Decimal("1e15"), "E": Decimal("1e18")}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eE][+-]?[0-9]+|[KMGTPE]i|[numkMGTPE]|)$")

CPU, MEMORY, EPHEMERAL, PODS = "cpu", "memory", "ephemeral-storage", "pods"


class QuantityError(ValueError):
    """A resource quantity that is not in Kubernetes' quantity syntax."""


def parse_quantity(value: Any) -> Decimal:
    """``"500m"`` -> 0.5, ``"2Gi"`` -> 2147483648, ``4`` -> 4 (exact, as a Decimal)."""
    if isinstance(value, bool):
        raise QuantityError(f"quantity {value!r} is not a number")
    if isinstance(value, (int, float)):
        return Decimal(str(value))
    if not isinstance(value, str):
        raise QuantityError(f"quantity {value!r} must be a string such as '500m' or '2Gi'")
    m = _QUANTITY.match(value.strip())
    if not m or m.group(1) in ("", ".", "+", "-"):
        raise QuantityError(
            f"quantity {value!r} is not valid: write a number with an optional suffix "
            "(m, k, M, G, Ki, Mi, Gi, ...), e.g. '500m', '16Gi', '4'")
    try:
        number = Decimal(m.group(1))
    except InvalidOperation as e:
        raise QuantityError(f"quantity {value!r} is not a number") from e
    suffix = m.group(2)
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix[:1] in ("e", "E"):
        return number * (Decimal(10) ** int(suffix[1:]))
    return number * _DECIMAL[suffix]


def scheduler_units(resource: str, value: Any) -> int:
    """The integer the scheduler compares: MilliValue() for cpu, Value() (rounded up) otherwise.

    As ``framework.Resource.Add`` (``pkg/scheduler/framework/types.go``) stores them.
    """
    if isinstance(value, str):
        return _units_cached(resource == CPU, value)
    return _units(resource == CPU, value)


@functools.lru_cache(maxsize=4096)
def _units_cached(milli: bool, value: str) -> int:
    # big clusters repeat a handful of quantity strings ("100m", "1Gi", "1")
    return _units(milli, value)


def _units(milli: bool, value: Any) -> int:
    q = parse_quantity(value)
    if milli:
        return math.ceil(q * 1000)
    return math.ceil(q)


def resource_list(obj: Mapping[str, Any] | None) -> dict[str, int]:
    return {name: scheduler_units(name, v) for name, v in (obj or {}).items()}


# ---------------------------------------------------------------------------
# pod requests (k8s.io/component-helpers/resource/helpers.go PodRequests)
# ---------------------------------------------------------------------------

def container_requests(container: Mapping[str, Any]) -> dict[str, int]:
    """A container's requests after API defaulting.

    ``SetDefaults_Pod`` (``pkg/apis/core/v1/defaults.go``) copies a limit into
    the request when the request of that resource is omitted; extended
    resources may even be given as limits only (requests must equal limits).
    """
    resources = container.get("resources") or {}
    out = resource_list(resources.get("limits"))
    out.update(resource_list(resources.get("requests")))
    return out


def add_into(into: dict[str, int], other: Mapping[str, int]) -> None:
    for k, v in other.items():
        into[k] = into.get(k, 0) + v


def _max(into: dict[str, int], other: Mapping[str, int]) -> None:
    for k, v in other.items():
        if v > into.get(k, 0):
            into[k] = v


def pod_requests(pod: Mapping[str, Any]) -> dict[str, int]:
    """What a pod asks of a node, in scheduler units (cpu in millicores).

    The larger, per resource, of (a) the sum over app containers plus
    restartable ("sidecar") init containers and (b) each plain init container
    plus the sidecars started before it; then pod overhead is added.  This is
    ``PodRequests`` in ``k8s.io/component-helpers/resource/helpers.go``.
    """
    spec = pod.get("spec") or {}
    reqs: dict[str, int] = {}
    for c in spec.get("containers") or []:
        add_into(reqs, container_requests(c))
    sidecars: dict[str, int] = {}
    init_max: dict[str, int] = {}
    for c in spec.get("initContainers") or []:
        creq = container_requests(c)
        if c.get("restartPolicy") == "Always":
            add_into(reqs, creq)
            add_into(sidecars, creq)
            step = dict(sidecars)
        else:
            step = dict(creq)
            add_into(step, sidecars)
        _max(init_max, step)
    _max(reqs, init_max)
    add_into(reqs, resource_list(spec.get("overhead")))
    return reqs

