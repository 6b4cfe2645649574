"""Builders shared by the test modules (keep this small: what several modules need)."""

from __future__ import annotations

from gpuspawner.capacity.model import PoolView, Taint, pool_id

GKE = "cloud.google.com/gke-nodepool"


def pool_view(group: str, product: str, *, total: int, free: int, per_node: int, nodes: int = 2,
              resource: str = "nvidia.com/gpu") -> PoolView:
    """A discovered GPU pool of a GKE node group, as the capacity cache hands it out."""
    return PoolView(
        id=pool_id(group, product, resource),
        resource=resource,
        product=product,
        memory_mib=None,
        node_group_label=GKE,
        node_group=group,
        nodes=nodes,
        total=total,
        free=free,
        max_free_per_node=per_node,
        driver_version=None,
        cuda_version=None,
        scale_up=None,
        defining_labels=((GKE, group),),
        taints=(Taint("nvidia.com/gpu", "present", "NoSchedule"),),
    )
