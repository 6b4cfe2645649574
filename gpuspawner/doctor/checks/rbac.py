"""Access the hub needs and does not have: finding ``rbac-missing`` (and ``checks-skipped``
when doctor could not tell).  Pure; the facts come from ``gather`` (``doctor.rbac``).
"""

from __future__ import annotations

from gpuspawner.doctor.findings import Finding, ObjectRef
from gpuspawner.doctor.rbac import RbacCheck, RbacFacts
from gpuspawner.kube.api_errors import CLUSTER_ROLE_NAME, rules_text

__all__ = ["check_rbac"]


def _denied(rbac: RbacFacts, denied: list[RbacCheck]) -> Finding:
    cluster = [c for c in denied if c.namespace is None]
    fix = (
        f"kubectl apply -f deploy/rbac.yaml (ClusterRole {CLUSTER_ROLE_NAME} with the rules "
        f"[{rules_text()}], bound to the hub's ServiceAccount)"
        if cluster
        else "Grant the hub's Role these verbs in its namespace (Zero to JupyterHub's hub Role has them)."
    )
    return Finding(
        "rbac-missing",
        "error",
        f"{rbac.subject} may not: {'; '.join(c.rule for c in denied)} (checked by {denied[0].how}); without "
        "them the hub shows GPU capacity as unknown"
        + (" and cannot start servers." if len(cluster) < len(denied) else "."),
        fix,
        tuple(ObjectRef("ClusterRole" if c.namespace is None else "Role", c.rule) for c in denied),
        {"subject": rbac.subject, "denied": [
            {"verb": c.verb, "resource": c.resource, "namespace": c.namespace, "how": c.how,
             "reason": c.reason} for c in denied]},
    )


def _unknown(rbac: RbacFacts, unknown: list[RbacCheck]) -> Finding:
    return Finding(
        "checks-skipped",
        "info",
        f"Could not tell whether {rbac.subject} may: " + "; ".join(c.rule for c in unknown) + ".",
        "Run doctor with credentials that may create SubjectAccessReviews, or inside the hub's pod.",
        (),
        {"unknown": [c.rule for c in unknown]},
    )


def check_rbac(rbac: RbacFacts | None) -> list[Finding]:
    """``rbac-missing``: access the hub needs and does not have."""
    if rbac is None:
        return []
    denied = [c for c in rbac.checks if c.allowed is False]
    unknown = [c for c in rbac.checks if c.allowed is None]
    out = []
    if denied:
        out.append(_denied(rbac, denied))
    if unknown:
        out.append(_unknown(rbac, unknown))
    return out
