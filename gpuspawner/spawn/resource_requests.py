"""What a GPU server's pod asks of its node besides GPUs: CPU, memory, ephemeral storage, a pod slot.

Pure: the capacity layer's quantity rules only. docs/capacity.md, "CPU and memory fit", has the rule.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from gpuspawner.capacity.node_resources import base_of

__all__ = ["REQUEST_TRAITS", "server_request", "profile_requests"]

#: KubeSpawner's traits that set the notebook container's CPU, memory and other resources
REQUEST_TRAITS = ("cpu_guarantee", "cpu_limit", "mem_guarantee", "mem_limit",
                  "extra_resource_guarantees", "extra_resource_limits")

# JupyterHub's ByteSpecification: K, M, G, T are powers of 1024 (jupyterhub/traitlets.py)
_BYTES = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT])?\s*$")
_SCALE = {None: 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def _mem(value: Any) -> int | None:
    """A KubeSpawner ``mem_*`` value in bytes: an int, or ByteSpecification text (``"32G"``)."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return int(value)
    m = _BYTES.match(str(value))
    return int(float(m.group(1)) * _SCALE[m.group(2)]) if m else None


def _cpu(value: Any) -> int | None:
    """A KubeSpawner ``cpu_*`` value (cores, a float) in millicores."""
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(round(float(value) * 1000))
    except (TypeError, ValueError):
        return None


def server_request(settings: Sequence[Mapping[str, Any]]) -> tuple[int, int, int, int]:
    """The (CPU millicores, memory bytes, ephemeral storage bytes, pods) a server's pod requests, from
    the values of :data:`REQUEST_TRAITS` in ``settings`` (the spawner's, then each override that
    applies, later ones winning, as KubeSpawner applies ``kubespawner_override``).

    KubeSpawner puts a guarantee in the container's requests and a limit in its limits; a limit
    without a request becomes the request too (the API server defaults requests to limits), which
    is what the scheduler then counts."""
    merged: dict[str, Any] = {}
    for s in settings:
        for key in REQUEST_TRAITS:
            if key in s:
                merged[key] = s[key]
    cpu = _cpu(merged.get("cpu_guarantee"))
    if cpu is None:
        cpu = _cpu(merged.get("cpu_limit")) or 0
    memory = _mem(merged.get("mem_guarantee"))
    if memory is None:
        memory = _mem(merged.get("mem_limit")) or 0
    extra: dict[str, Any] = {}
    for key in ("extra_resource_limits", "extra_resource_guarantees"):  # guarantees win
        value = merged.get(key)
        if isinstance(value, Mapping):
            extra.update(value)
    _, _, ephemeral = base_of({k: v for k, v in extra.items() if k == "ephemeral-storage"})
    return (cpu, memory, ephemeral, 1)


def profile_requests(defaults: Mapping[str, Any], override: Mapping[str, Any],
                     option: str | None, options: Mapping[str, Any]) -> dict[str | None, tuple[int, ...]]:
    """The request of each image key of a profile: the spawner's ``defaults``, the profile's
    ``override``, and the choice of the image ``option`` (its ``kubespawner_override``); key None (a
    free-text image) asks what the profile itself asks."""
    own = server_request([defaults, override])
    out: dict[str | None, tuple[int, ...]] = {None: own, "": own}
    choices = (options.get(option) or {}).get("choices") if option else None
    if isinstance(choices, Mapping):
        for key, choice in choices.items():
            extra = choice.get("kubespawner_override") if isinstance(choice, Mapping) else None
            out[key] = server_request([defaults, override, extra if isinstance(extra, Mapping) else {}])
    return out
