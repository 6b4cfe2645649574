"""What doctor read of Kueue for the hub's queued pools (``KueueState``).  Pure, stdlib only."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["KueueState", "VISIBILITY_APISERVICE", "ADMISSION_GATE", "probe_pod"]

# the scheduling gate Kueue's pod webhook puts on a queued pod [Kueue site, plain_pods.md]
ADMISSION_GATE = "kueue.x-k8s.io/admission"


def probe_pod(queue: str) -> dict:
    """The pod doctor creates with ``dryRun=All`` to see Kueue's webhook gate a queued pod (nothing is
    stored; webhooks with ``sideEffects: None`` are called on dry runs)."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "gpuspawner-doctor-kueue-", "labels": {"kueue.x-k8s.io/queue-name": queue}},
        "spec": {"containers": [{"name": "probe", "image": "registry.k8s.io/pause:3.10"}]},
    }

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
    # a server-side dry run of a queued pod: Kueue's webhook answered and gated it (None: not tried)
    webhook: bool | None = None
    webhook_reason: str = ""
