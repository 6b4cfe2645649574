"""What doctor reads of Dynamic Resource Allocation, and the DRA access the hub needs.  Pure, stdlib only.
Design notes: docs/dra.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuspawner.doctor.rbac import RbacCheck
from gpuspawner.kube.api_errors import DRA_CLUSTER_ROLE_RULES, DRA_GROUP, DRA_ROLE_RULES, INFORMER_VERBS

__all__ = ["DRA_GROUP", "REQUIRED_DRA_RBAC", "REQUIRED_DRA_NAMESPACED_RBAC", "DraState"]

#: (verb, resource) the capacity cache's DRA informers need at the cluster scope
#: (``kube.api_errors.DRA_CLUSTER_ROLE_RULES``)
REQUIRED_DRA_RBAC: tuple[tuple[str, str], ...] = tuple(
    (verb, resource) for resource, _ in DRA_CLUSTER_ROLE_RULES for verb in INFORMER_VERBS
)
#: (verb, resource) a DRA spawn needs in the hub's namespace (``kube.api_errors.DRA_ROLE_RULES``)
REQUIRED_DRA_NAMESPACED_RBAC: tuple[tuple[str, str], ...] = tuple(
    (verb, resource) for resource, verbs in DRA_ROLE_RULES for verb in verbs
)


@dataclass
class DraState:
    """What doctor read of DRA.  ``served``: the cluster serves ``resource.k8s.io/v1``; a list
    that was forbidden is None (its checks are skipped, ``rbac`` says why)."""

    served: bool
    classes: list[dict] | None = None
    slices: list[dict] | None = None
    claims: list[dict] | None = None
    rbac: tuple[RbacCheck, ...] = field(default_factory=tuple)
