"""Doctor's checks, one module per topic, and :func:`run_checks`, which runs them all.
Design notes: docs/troubleshooting.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.doctor.checks.cull import CullSetup, check_cull_coverage
from gpuspawner.doctor.checks.dra import check_dra, dra_gpu_nodes, reconcile
from gpuspawner.doctor.checks.gfd import check_gfd_labels
from gpuspawner.doctor.checks.images import check_images
from gpuspawner.doctor.checks.kueue import check_kueue
from gpuspawner.doctor.checks.nodes import check_nodes, gpu_evidence
from gpuspawner.doctor.checks.pending import check_pending_pods
from gpuspawner.doctor.checks.rbac import check_rbac
from gpuspawner.doctor.checks.scaleup import check_scale_up
from gpuspawner.doctor.checks.taints import check_taints
from gpuspawner.doctor.checks.warmth import check_image_warmth
from gpuspawner.doctor.dra_state import DraState
from gpuspawner.doctor.facts import HubFacts
from gpuspawner.doctor.kueue import KueueState
from gpuspawner.doctor.findings import Finding, ObjectRef, by_severity
from gpuspawner.doctor.rbac import RbacFacts

__all__ = [
    "CullSetup",
    "check_cull_coverage",
    "check_dra",
    "check_gfd_labels",
    "check_image_warmth",
    "check_images",
    "check_kueue",
    "check_nodes",
    "check_pending_pods",
    "check_rbac",
    "check_taints",
    "dra_gpu_nodes",
    "gpu_evidence",
    "run_checks",
]


def _skipped(nodes: Sequence[Any] | None, pods: Sequence[Any] | None) -> list[Finding]:
    """``checks-skipped`` when nodes or pods could not be listed."""
    skipped = []
    if nodes is None:
        skipped.append("node, label, taint and image checks (nodes could not be listed)")
    if pods is None:
        skipped.append("Pending-pod check (pods could not be listed)")
    if not skipped:
        return []
    return [Finding(
        "checks-skipped",
        "info",
        "Skipped: " + "; ".join(skipped) + ".",
        "Give the credentials doctor runs with cluster-wide read access to nodes and pods "
        "(e.g. kubectl apply -f deploy/rbac.yaml and run doctor in the hub's pod).",
    )]


def _profiles_skipped(hub: HubFacts) -> list[Finding]:
    """``profile-checks-skipped`` without ``--config``, or when no profile declares CUDA."""
    if hub.source is None:
        return [Finding(
            "profile-checks-skipped",
            "info",
            "No --config given: the image/driver check was skipped and taints were judged against "
            "gpuspawner's default gpu_tolerated_taint_keys.",
            "Pass the hub's config: gpuspawner doctor --config /usr/local/etc/jupyterhub/jupyterhub_config.py",
        )]
    if not any(img.cuda.has_cuda for img in hub.images):
        return [Finding(
            "profile-checks-skipped",
            "info",
            f"No GPU profile in {hub.source} declares its image's CUDA, so the image/driver check was skipped.",
            'Declare it on the profile (or its image choice), e.g. "cuda": "12.4" or '
            '"cuda": {"cuda": "12.4", "compat": true}.',
            tuple(ObjectRef("Profile", s) for s in hub.profiles),
        )]
    return []


def run_checks(
    nodes: Sequence[Mapping[str, Any]] | None,
    pods: Sequence[Mapping[str, Any]] | None,
    *,
    config: CapacityConfig,
    hub: HubFacts,
    rbac: RbacFacts | None,
    now: float,
    pending_after: float,
    dra: DraState | None = None,
    cull: CullSetup | None = None,
    kueue: KueueState | None = None,
) -> list[Finding]:
    """All checks, errors first.  ``nodes``/``pods`` None: they could not be
    listed (the reason is then an ``rbac-missing`` finding) and their checks
    are reported as skipped.  ``dra``: what ``gather`` read of ``resource.k8s.io/v1``
    (None or not served: no DRA checks); the device-plugin findings it explains are dropped.
    ``cull``: culling is configured (None: its coverage is not checked)."""
    out: list[Finding] = list(check_rbac(rbac))
    if nodes is not None:
        out += check_nodes(nodes, config)
        out += check_gfd_labels(nodes, config)
        out += check_taints(nodes, hub, config)
        out += check_images(nodes, hub, config)
        out += check_image_warmth(nodes, hub, config, dra)
        if cull is not None:
            out += check_cull_coverage(nodes, pods, cull.series, cull.prometheus_url)
    if pods is not None:
        out += check_pending_pods(pods, config, now, pending_after, nodes)
    out += check_scale_up(config.declared_pools, hub)
    out += _skipped(nodes, pods)
    out += _profiles_skipped(hub)
    out = reconcile(out, dra, config)
    subject = rbac.subject if rbac is not None else "the hub"
    out += check_dra(dra, nodes, config=config, subject=subject, now=now, pending_after=pending_after)
    out += check_kueue(kueue, hub.kueue_queues, nodes, config)
    return by_severity(out)
