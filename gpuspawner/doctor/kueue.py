"""What doctor read of Kueue for the hub's queued pools (``KueueState``).  Pure, stdlib only."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["KueueState", "VISIBILITY_APISERVICE"]

# the APIService of Kueue's visibility API (positions in line) [Kueue config/components/visibility]
VISIBILITY_APISERVICE = "v1beta2.visibility.kueue.x-k8s.io"


@dataclass
class KueueState:
    """``served``: the cluster serves ``kueue.x-k8s.io/v1beta2``; a list doctor could not read is None.
    ``visibility``: the visibility APIService is Available (None: not read), ``visibility_reason`` why not."""

    served: bool
    namespace: str | None = None  # the servers' namespace, where the LocalQueues are
    local_queues: list[dict] | None = None
    cluster_queues: list[dict] | None = None
    flavors: list[dict] | None = None
    visibility: bool | None = None
    visibility_reason: str = ""
