"""``scale-up-too-slow``: declared scale-up pools a spawn cannot wait for (their scale-up plus an image pull)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gpuspawner.doctor.facts import HubFacts
from gpuspawner.doctor.findings import Finding, ObjectRef
from gpuspawner.spawn.scale_up import slow_pools, start_timeout_for

__all__ = ["check_scale_up"]


def check_scale_up(declared: Iterable[Any], hub: HubFacts) -> list[Finding]:
    """A warning per declared pool (``gpu_declared_pools``) whose declared ``minutes`` plus
    ``gpu_image_pull_seconds`` exceed ``gpu_start_timeout_max``: every spawn that waits for its
    scale-up times out. Within the bound the spawner raises ``start_timeout`` itself (the hub's
    log says so per spawn), so nothing is reported."""
    out = []
    for slow in slow_pools(declared, hub.image_pull_seconds, hub.start_timeout_max):
        given = start_timeout_for(slow.minutes, hub.image_pull_seconds, hub.start_timeout, hub.start_timeout_max)
        out.append(Finding(
            "scale-up-too-slow",
            "warning",
            f"Spawns that wait for a new node of pool {slow.pool_id} time out: {slow.words()}",
            f"raise c.GPUSpawner.gpu_start_timeout_max to at least {slow.needed:.0f} (and any proxy or "
            "browser timeout in front of the hub), or make the pool's nodes start faster (keep one node warm: "
            "a minimum size of 1)",
            (ObjectRef("Setting", "gpu_declared_pools"),),
            {"pool": slow.pool_id, "minutes": slow.minutes, "needed_seconds": slow.needed,
             "start_timeout_max": slow.most, "start_timeout_given": given},
        ))
    return out
