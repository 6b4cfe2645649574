"""Kueue for the hub's queued pools (``c.GPUSpawner.gpu_kueue_queues``): findings ``kueue-*``.  Pure.
Design notes: docs/troubleshooting.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.capacity.quantity import parse_quantity
from gpuspawner.doctor.checks.nodes import gpu_evidence
from gpuspawner.doctor.findings import Finding, ObjectRef
from gpuspawner.doctor.kueue import VISIBILITY_APISERVICE, KueueState
from gpuspawner.kube import objects
from gpuspawner.queue.rules import QueueRule

__all__ = ["KUEUE_FINDING_IDS", "check_kueue"]

KUEUE_FINDING_IDS = (
    "kueue-not-installed",
    "kueue-localqueue-missing",
    "kueue-clusterqueue-stopped",
    "kueue-flavor-matches-no-pool",
    "kueue-quota-exceeds-pool",
    "kueue-visibility-not-served",
    "kueue-webhook-unreachable",
)

_FIX_EXAMPLE = "see docs/kueue.md and deploy/kueue-example.yaml"


def _by_name(items: Sequence[Any] | None) -> dict[str, Mapping[str, Any]]:
    return {n: i for i in items or () if isinstance(i, Mapping) and (n := objects.name(i))}


def _stopped(cq: Mapping[str, Any]) -> str | None:
    """Why a ClusterQueue admits nothing (None: it admits)."""
    policy = objects.section(cq, "spec").get("stopPolicy")
    if isinstance(policy, str) and policy not in ("", "None"):
        return f"its stopPolicy is {policy}"
    active = objects.condition(cq, "Active")
    if active is not None and active.get("status") == "False":
        return f"it is inactive ({active.get('reason') or 'no reason'}: {active.get('message') or 'no message'})"
    return None


def _gpu_quotas(cq: Mapping[str, Any], is_gpu: Any) -> list[tuple[str, str, Fraction]]:
    """(flavor, GPU resource, nominal quota + borrowing limit) of a ClusterQueue."""
    out = []
    for group in objects.items(objects.section(cq, "spec").get("resourceGroups")):
        for flavor in objects.items(group.get("flavors") if isinstance(group, Mapping) else None):
            name = flavor.get("name") if isinstance(flavor, Mapping) else None
            for res in objects.items(flavor.get("resources") if isinstance(flavor, Mapping) else None):
                if not isinstance(res, Mapping) or not isinstance(res.get("name"), str) or not is_gpu(res["name"]):
                    continue
                try:
                    quota = parse_quantity(res.get("nominalQuota", 0)) + parse_quantity(res.get("borrowingLimit", 0))
                except (ValueError, TypeError):
                    continue
                if isinstance(name, str):
                    out.append((name, res["name"], quota))
    return out


def _matching_gpu_nodes(flavor: Mapping[str, Any], gpu_nodes: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    wanted = objects.section(objects.section(flavor, "spec"), "nodeLabels")
    return [n for n in gpu_nodes if all(objects.labels(n).get(k) == v for k, v in wanted.items())]


def _allocatable(node: Mapping[str, Any], resource: str) -> Fraction:
    try:
        return parse_quantity(objects.section(objects.section(node, "status"), "allocatable").get(resource, 0))
    except (ValueError, TypeError):
        return Fraction(0)


def check_kueue(state: KueueState | None, rules: Sequence[QueueRule], nodes: Sequence[Mapping[str, Any]] | None,
                config: CapacityConfig) -> list[Finding]:
    """The ``kueue-*`` findings (none without queue rules, or when Kueue was not read)."""
    if not rules or state is None:
        return []
    if not state.served:
        return [Finding("kueue-not-installed", "error",
                        "c.GPUSpawner.gpu_kueue_queues names Kueue LocalQueues, but the cluster does not serve "
                        "kueue.x-k8s.io/v1beta2: every queued spawn would wait for nothing.",
                        f"Install Kueue v0.17 with the pod integration ({_FIX_EXAMPLE}), or remove gpu_kueue_queues.")]
    out: list[Finding] = []
    lqs, cqs, flavors = _by_name(state.local_queues), _by_name(state.cluster_queues), _by_name(state.flavors)
    ns = state.namespace
    used: dict[str, set[str]] = {}  # ClusterQueue -> LocalQueues of the rules behind it
    for queue in sorted({r.queue for r in rules}):
        if state.local_queues is None:
            break
        lq = lqs.get(queue)
        if lq is None:
            out.append(Finding("kueue-localqueue-missing", "error",
                               f"LocalQueue {queue} of c.GPUSpawner.gpu_kueue_queues does not exist in namespace "
                               f"{ns}: Kueue leaves its servers' pods gated, and they never start.",
                               f"Create it: kubectl -n {ns} create -f - with kind LocalQueue, name {queue} and "
                               f"spec.clusterQueue ({_FIX_EXAMPLE}).",
                               (ObjectRef("LocalQueue", queue, ns),)))
            continue
        cq_name = objects.section(lq, "spec").get("clusterQueue")
        if isinstance(cq_name, str):
            used.setdefault(cq_name, set()).add(queue)
    for cq_name, queues in sorted(used.items()):
        if state.cluster_queues is None:
            break
        cq = cqs.get(cq_name)
        why = "it does not exist" if cq is None else _stopped(cq)
        if why:
            out.append(Finding("kueue-clusterqueue-stopped", "error",
                               f"LocalQueue {', '.join(sorted(queues))} points at ClusterQueue {cq_name}, but {why}: "
                               "no queued server is admitted.",
                               f"Create or restart it: kubectl patch clusterqueue {cq_name} --type=merge "
                               "-p '{\"spec\":{\"stopPolicy\":\"None\"}}' (or fix what makes it inactive).",
                               (ObjectRef("ClusterQueue", cq_name),)))
    if nodes is not None and state.flavors is not None and state.cluster_queues is not None:
        out += _flavor_findings(used, cqs, flavors, nodes, config)
    if state.webhook is False:
        out.append(Finding("kueue-webhook-unreachable", "error",
                           f"Kueue's pod webhook did not gate a queued pod (a server-side dry run in namespace {ns}): "
                           f"{state.webhook_reason}. Queued servers would either fail to start or start unqueued.",
                           "Check that Kueue's manager runs and that the API server reaches its webhook service "
                           "(kubectl get mutatingwebhookconfiguration -o wide; the kueue-webhook-service "
                           "endpoints), and Kueue's configuration (integrations.frameworks: [\"pod\"], "
                           "managedJobsNamespaceSelector): see docs/kueue.md.",
                           (ObjectRef("MutatingWebhookConfiguration", "kueue-mutating-webhook-configuration"),)))
    if state.visibility is False:
        out.append(Finding("kueue-visibility-not-served", "warning",
                           f"Kueue's visibility API ({VISIBILITY_APISERVICE}) is not served ({state.visibility_reason}): "
                           "queued users see \"waiting for GPU quota\" instead of their place in line.",
                           "Check that Kueue runs with its visibility server (feature gate VisibilityOnDemand, on by "
                           "default) and that the APIService is Available: kubectl get apiservice "
                           f"{VISIBILITY_APISERVICE}; the API server needs the --requestheader-* and --proxy-client-* "
                           "flags for aggregated APIs.",
                           (ObjectRef("APIService", VISIBILITY_APISERVICE),)))
    return out


def _flavor_findings(used: Mapping[str, set[str]], cqs: Mapping[str, Mapping[str, Any]],
                     flavors: Mapping[str, Mapping[str, Any]], nodes: Sequence[Mapping[str, Any]],
                     config: CapacityConfig) -> list[Finding]:
    out: list[Finding] = []
    gpu_nodes = [n for n in nodes if isinstance(n, Mapping) and gpu_evidence(n, config).is_gpu_node]
    seen: set[tuple[str, str]] = set()
    for cq_name in sorted(used):
        cq = cqs.get(cq_name)
        if cq is None:
            continue
        for flavor_name, resource, quota in _gpu_quotas(cq, config.is_gpu_resource):
            if (flavor_name, resource) in seen:
                continue
            seen.add((flavor_name, resource))
            flavor = flavors.get(flavor_name)
            if flavor is None:
                continue  # Kueue marks the ClusterQueue inactive (FlavorNotFound): reported above
            matched = _matching_gpu_nodes(flavor, gpu_nodes)
            labels = objects.section(objects.section(flavor, "spec"), "nodeLabels")
            shown = ", ".join(f"{k}={v}" for k, v in sorted(labels.items())) or "none"
            if not matched:
                out.append(Finding("kueue-flavor-matches-no-pool", "warning",
                                   f"ResourceFlavor {flavor_name} (GPU quota in ClusterQueue {cq_name}) has node "
                                   f"labels {shown}, which no GPU node carries: servers admitted in it wait Pending.",
                                   "Give the flavor the labels of one GPU pool (its node group label and "
                                   "nvidia.com/gpu.product; GET /hub/api/gpus lists the pools).",
                                   (ObjectRef("ResourceFlavor", flavor_name),), {"node_labels": dict(labels)}))
                continue
            held = sum((_allocatable(n, resource) for n in matched), Fraction(0))
            if quota > held:
                out.append(Finding("kueue-quota-exceeds-pool", "warning",
                                   f"ClusterQueue {cq_name} may admit {_num(quota)} {resource} in flavor {flavor_name}, "
                                   f"but its {len(matched)} node(s) hold {_num(held)}: servers admitted beyond that "
                                   "wait Pending instead of in line.",
                                   f"Lower nominalQuota (plus borrowingLimit) of {resource} in flavor {flavor_name} "
                                   f"to at most {_num(held)}, or add nodes to the pool.",
                                   (ObjectRef("ClusterQueue", cq_name), ObjectRef("ResourceFlavor", flavor_name)),
                                   {"quota": _num(quota), "allocatable": _num(held)}))
    return out


def _num(value: Fraction) -> int | float:
    return int(value) if value.denominator == 1 else float(value)
