"""Live GPU capacity: what the cluster can offer a spawn right now.  Design notes: docs/capacity.md."""

from gpuspawner.capacity.config import CapacityConfig, DeclaredPool
from gpuspawner.capacity.model import CapacitySnapshot, NodeView, PoolView, ScaleUp, Taint, pool_id

__all__ = [
    "CapacityCache",
    "CapacityConfig",
    "CapacitySnapshot",
    "DeclaredPool",
    "NodeView",
    "PoolView",
    "ScaleUp",
    "Taint",
    "pool_id",
]


def __getattr__(name):
    if name == "CapacityCache":
        from gpuspawner.capacity.cache import CapacityCache

        return CapacityCache
    raise AttributeError(f"module 'gpuspawner.capacity' has no attribute {name!r}")
