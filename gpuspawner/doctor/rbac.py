"""The access the hub needs, and what doctor found out about it.  Pure, stdlib only.
Design notes: docs/troubleshooting.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuspawner.kube.api_errors import CLUSTER_ROLE_RULES

__all__ = ["RbacCheck", "RbacFacts", "REQUIRED_RBAC", "REQUIRED_NAMESPACED_RBAC"]


@dataclass(frozen=True, slots=True)
class RbacCheck:
    """One access the hub needs, and whether it has it (None: could not tell)."""

    verb: str
    resource: str
    namespace: str | None  # None: cluster scope
    allowed: bool | None
    how: str  # "SubjectAccessReview" | "SelfSubjectAccessReview" | "list call"
    reason: str = ""

    @property
    def rule(self) -> str:
        scope = f"in namespace {self.namespace}" if self.namespace else "at the cluster scope"
        return f"{self.resource}: {self.verb} {scope}"


@dataclass(frozen=True)
class RbacFacts:
    subject: str  # whose rights: "system:serviceaccount:jhub:hub" or "the current credentials"
    checks: tuple[RbacCheck, ...]


#: (verb, resource) at the cluster scope: deploy/rbac.yaml's ClusterRole, which the capacity
#: cache needs (``kube.api_errors.CLUSTER_ROLE_RULES``)
REQUIRED_RBAC: tuple[tuple[str, str], ...] = tuple(
    (verb, resource) for resource, verbs in CLUSTER_ROLE_RULES for verb in verbs
)
#: what KubeSpawner does in the hub's namespace (Zero to JupyterHub's hub Role)
REQUIRED_NAMESPACED_RBAC: tuple[tuple[str, str], ...] = (
    ("create", "pods"),
    ("delete", "pods"),
    ("get", "pods"),
)
