"""The capacity cache as a spawner reaches it: the cache or None, and each problem with it logged once."""

from __future__ import annotations

import re
from typing import Any

from gpuspawner.kube.api_errors import rules_text

__all__ = ["cache_of", "log_problem"]

_logged: set[str] = set()  # the problems logged in this process (numbers left out)


def cache_of(spawner: Any) -> Any:
    """The process's shared ``CapacityCache``, or None (logged once) when it cannot start."""
    try:
        return spawner.shared_capacity_cache()
    except Exception as e:
        log_problem(spawner, f"the GPU capacity cache could not start: {e}")
        return None


def log_problem(spawner: Any, problem: str) -> None:
    """Log a capacity problem once per distinct problem per process: the page is rendered often, and
    the figures' age (and any other number) changes with every view, so numbers do not make it new."""
    key = re.sub(r"[0-9]+", "N", problem)
    if key in _logged:
        return
    if len(_logged) >= 256:  # an API server that words each failure anew
        _logged.clear()
    _logged.add(key)
    spawner.log.warning(
        "%s. Static profiles are still offered; GPU profiles show 'capacity unknown'%s. "
        "If this is a permissions problem, apply deploy/rbac.yaml (ClusterRole rules: %s at the cluster scope).",
        problem,
        " and admit spawns unchecked" if spawner.gpu_admit_without_capacity else " and refuse GPU spawns",
        rules_text(),
    )
