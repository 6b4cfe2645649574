"""How long a spawn on a pool that must scale up may take: the pool's declared scale-up time plus an image pull.

Pure: the capacity layer's records only. docs/capacity.md, "Scale-up and the start timeout", has the rule.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gpuspawner.capacity.model import PoolView

__all__ = ["SlowPool", "needs_new_node", "start_timeout_for", "slow_pools", "wait_words"]


def needs_new_node(pool: PoolView, gpus: int) -> bool:
    """Whether a server of ``gpus`` on ``pool`` waits for the autoscaler: no node has them free now,
    and the pool may grow."""
    su = pool.scale_up
    return su is not None and pool.nodes < su.max_nodes and pool.max_free_per_node < gpus


def start_timeout_for(minutes: float, pull_seconds: float, start_timeout: float, most: float) -> float:
    """The start timeout of a spawn that waits for a new node: long enough for the declared scale-up
    (``minutes``) and an image pull, never shorter than the hub's own, never longer than ``most``."""
    needed = minutes * 60 + pull_seconds
    return max(start_timeout, min(needed, most))


@dataclass(frozen=True)
class SlowPool:
    """A declared scale-up pool a spawn cannot wait for."""

    pool_id: str
    minutes: float
    needed: float  # seconds: scale-up plus image pull
    most: float  # seconds a spawn may wait (gpu_start_timeout_max)

    def words(self) -> str:
        return (f"pool {self.pool_id} declares a scale-up of about {self.minutes:g} minutes; with an image "
                f"pull a spawn there needs about {self.needed:.0f} s, but a spawn waits at most {self.most:.0f} s "
                "(c.GPUSpawner.gpu_start_timeout_max)")


def slow_pools(declared: Iterable[Any], pull_seconds: float, most: float) -> list[SlowPool]:
    """The declared pools (``DeclaredPool``: ``id``, ``minutes``) whose scale-up and image pull take
    longer than a spawn may wait."""
    out = []
    for pool in declared:
        needed = pool.minutes * 60 + pull_seconds
        if needed > most:
            out.append(SlowPool(pool.id, pool.minutes, needed, most))
    return out


def wait_words(minutes: float) -> str:
    """``no machine running now; one starts in about 7 minutes``: a pool with no node yet."""
    n = max(1, int(minutes + 0.5))  # as the page's script rounds (Math.round)
    return f"no machine running now; one starts in about {n} minute{'' if n == 1 else 's'}"
