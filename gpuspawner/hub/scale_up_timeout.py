"""A GPU spawn's start timeout when its pool must scale up, and the hub's warning about pools it cannot wait for.

The rule is ``spawn/scale_up.py``; this module reads the spawner and its capacity snapshot.
"""

from __future__ import annotations

from typing import Any

from gpuspawner.spawn.options import OptionError, parse_gpu_count
from gpuspawner.spawn.profiles import GPU_COUNT_OPTION, GPU_POOL_OPTION
from gpuspawner.spawn.scale_up import needs_new_node, slow_pools, start_timeout_for

__all__ = ["stretch_for_pool", "stretch_for_options", "warn_slow_pools"]

_checked: list[bool] = []  # the slow pools were looked for in this process


def stretch_for_pool(spawner: Any, pool: Any, gpus: int) -> bool:
    """Raise ``spawner.start_timeout`` to cover ``pool``'s declared scale-up and an image pull when the
    server waits for a new node there; True when it was raised (and logged)."""
    if pool is None or not needs_new_node(pool, gpus):
        return False
    wanted = start_timeout_for(pool.scale_up.minutes, spawner.gpu_image_pull_seconds, spawner.start_timeout,
                               spawner.gpu_start_timeout_max)
    if wanted <= spawner.start_timeout:
        return False
    spawner.log.info("%s waits for pool %s to scale up (about %g min): start_timeout %g s -> %g s",
                     spawner._log_name, pool.id, pool.scale_up.minutes, spawner.start_timeout, wanted)
    spawner.start_timeout = wanted
    return True


def stretch_for_options(spawner: Any, snapshot: Any) -> bool:
    """Before ``start()`` hands JupyterHub its timeout: the pool the user named in their options
    (``gpu_pool``, ``gpus``), as the capacity snapshot sees it now (no API call)."""
    options = spawner.user_options or {}
    pool_id = options.get(GPU_POOL_OPTION)
    if not isinstance(pool_id, str) or snapshot is None:
        return False
    try:
        gpus = parse_gpu_count(options[GPU_COUNT_OPTION]) if GPU_COUNT_OPTION in options else 1
    except (OptionError, ValueError):
        return False  # load_user_options refuses it with the reason
    return stretch_for_pool(spawner, snapshot.pool(pool_id), gpus)


def warn_slow_pools(spawner: Any) -> list[str]:
    """Log, once per process, each declared pool a spawn cannot wait for; returns the lines. The hub's
    configuration does not change while it runs: after the first call, nothing is read."""
    if _checked:
        return []
    _checked.append(True)
    lines = []
    declared = spawner.capacity_config().declared_pools
    for slow in slow_pools(declared, spawner.gpu_image_pull_seconds, spawner.gpu_start_timeout_max):
        line = slow.words() + "; spawns there will time out: raise gpu_start_timeout_max or shorten the scale-up"
        spawner.log.warning(line)
        lines.append(line)
    return lines
