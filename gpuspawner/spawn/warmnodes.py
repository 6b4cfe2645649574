"""The preferred node affinity that steers a server toward the nodes of its pool that hold its image.

Pure: node names and the pool's view in, ``preferredDuringSchedulingIgnoredDuringExecution`` terms out.
Why names and not a label: docs/prepull.md, "Preferring warm nodes".
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

from gpuspawner.capacity.model import PoolView

#: The most warm nodes one pod names: the scheduler evaluates every term on every node it scores,
#: and a pod's spec should stay small. Enough that some warm node with room is among them.
MAX_WARM_NODES = 16
#: The weight of each term (1-100). One node matches at most one term (each names one node), so
#: every warm node scores the same; NodeAffinity normalises the scores, so the value only matters
#: beside an admin's own preferred terms, which keep their say with half the range.
WARM_WEIGHT = 50

# a node's name: a DNS-1123 subdomain (Kubernetes' ValidateNodeName); anything else is left out
_NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def warm_node_order(warm: Collection[str], pool: PoolView, gpus: int) -> list[str]:
    """``warm`` (nodes of ``pool`` that hold the image), those with ``gpus`` free now first, then the
    others (the counts may be a moment old), each by name; names that are not node names are
    left out. Walks the pool's nodes once: called once per spawn, never per view."""
    names = {n for n in warm if isinstance(n, str) and len(n) <= 253 and _NODE_NAME.match(n)}
    roomy = sorted(v.name for v in pool.node_views if v.name in names and v.free >= gpus)
    rest = sorted(names.difference(roomy))
    return roomy + rest


def warm_preferences(warm: Collection[str], pool: PoolView, gpus: int, *,
                     limit: int = MAX_WARM_NODES, weight: int = WARM_WEIGHT) -> list[dict[str, Any]]:
    """One preferred term per warm node (at most ``limit``): ``matchFields`` on ``metadata.name``,
    which takes one value per requirement (Kubernetes' ``ValidateNodeFieldSelectorRequirement``,
    ``pkg/apis/core/validation``). Preferred, never required: a cold node with room still takes
    the server. Empty when no node of the pool holds the image."""
    if not 1 <= weight <= 100:
        raise ValueError(f"a preferred term's weight is 1 to 100, not {weight!r}")
    return [
        {"weight": weight,
         "preference": {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [name]}]}}
        for name in warm_node_order(warm, pool, gpus)[:max(limit, 0)]
    ]
