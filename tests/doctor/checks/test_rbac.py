"""Access the hub needs and does not have (doctor.checks.rbac, doctor.rbac)."""

from __future__ import annotations

from gpuspawner.doctor import checks
from gpuspawner.doctor.rbac import REQUIRED_RBAC, RbacCheck, RbacFacts


def test_rbac_denied_is_an_error_with_the_clusterrole_fix():
    facts = RbacFacts("system:serviceaccount:jhub:hub", (
        RbacCheck("list", "nodes", None, False, "SubjectAccessReview"),
        RbacCheck("watch", "pods", None, False, "SubjectAccessReview"),
        RbacCheck("list", "pods", None, True, "SubjectAccessReview"),
    ))
    (f,) = checks.check_rbac(facts)
    assert f.id == "rbac-missing" and f.severity == "error"
    assert "nodes: list at the cluster scope" in f.summary and "pods: watch at the cluster scope" in f.summary
    assert "kubectl apply -f deploy/rbac.yaml" in f.fix
    assert [d["resource"] for d in f.details["denied"]] == ["nodes", "pods"]


def test_rbac_all_allowed_says_nothing_and_unknown_is_info():
    ok = RbacFacts("me", tuple(RbacCheck(v, r, None, True, "list call") for v, r in REQUIRED_RBAC))
    assert checks.check_rbac(ok) == []
    unknown = RbacFacts("me", (RbacCheck("watch", "pods", None, None, "watch call", "timeout"),))
    assert [(f.id, f.severity) for f in checks.check_rbac(unknown)] == [("checks-skipped", "info")]
