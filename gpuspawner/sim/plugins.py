"""The simulated scheduler's plugins: filters, scores, the FitError message.  Pure, stdlib only.
Design notes: docs/simulated-cluster.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Collection, Iterable, Mapping, Protocol, Sequence

from testcluster.node.pod_resources import CPU, EPHEMERAL, MEMORY, PODS, add_into, resource_list

# ---------------------------------------------------------------------------
# node accounting (the scheduler cache's NodeInfo)
# ---------------------------------------------------------------------------

@dataclass
class NodeInfo:
    """One node as the scheduler's cache sees it: the node and what its pods request."""

    node: dict[str, Any]
    requested: dict[str, int] = field(default_factory=dict)
    pods: set[str] = field(default_factory=set)  # "namespace/name" of non-terminal pods

    @property
    def name(self) -> str:
        return self.node["metadata"]["name"]

    def allocatable(self) -> dict[str, int]:
        return resource_list((self.node.get("status") or {}).get("allocatable"))

    def add_pod(self, key: str, requests: Mapping[str, int]) -> None:
        if key in self.pods:
            return
        self.pods.add(key)
        add_into(self.requested, requests)

    def remove_pod(self, key: str, requests: Mapping[str, int]) -> None:
        if key not in self.pods:
            return
        self.pods.discard(key)
        for k, v in requests.items():
            self.requested[k] = self.requested.get(k, 0) - v


# ---------------------------------------------------------------------------
# filters
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Status:
    """A filter's verdict on one node (``framework.Status``)."""

    plugin: str
    reasons: tuple[str, ...]
    # UnschedulableAndUnresolvable: preemption cannot help on this node
    unresolvable: bool


UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"

ERR_UNSCHEDULABLE = "node(s) were unschedulable"
ERR_NODE_NAME = "node(s) didn't match the requested node name"
ERR_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
ERR_TOO_MANY_PODS = "Too many pods"


def toleration_tolerates(tol: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """``Toleration.ToleratesTaint`` (``staging/src/k8s.io/api/core/v1/toleration.go``).

    An empty effect matches every effect; an empty key with ``Exists``
    matches every taint; ``Equal`` (or no operator) compares values.
    """
    effect = tol.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = tol.get("key") or ""
    if key and key != taint.get("key"):
        return False
    op = tol.get("operator") or "Equal"
    if op == "Exists":
        return True
    if op == "Equal":
        return (tol.get("value") or "") == (taint.get("value") or "")
    return False


def untolerated_taint(taints: Iterable[Mapping[str, Any]], tolerations: Iterable[Mapping[str, Any]],
                      effects: tuple[str, ...] = ("NoSchedule", "NoExecute")) -> Mapping[str, Any] | None:
    """The first taint with one of ``effects`` that no toleration tolerates
    (``FindMatchingUntoleratedTaint``)."""
    tols = list(tolerations or [])
    for taint in taints or []:
        if taint.get("effect") not in effects:
            continue
        if not any(toleration_tolerates(t, taint) for t in tols):
            return taint
    return None


def _label_int(value: str) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def requirement_matches(req: Mapping[str, Any], values_of: Mapping[str, str]) -> bool:
    """One node selector requirement (``nodeaffinity.NodeSelectorRequirementsAsSelector``)."""
    key = req.get("key")
    op = req.get("operator")
    vals = list(req.get("values") or [])
    present = key in values_of
    value = values_of.get(key)
    if op == "In":
        return present and value in vals
    if op == "NotIn":
        return not present or value not in vals
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt"):
        if not present or len(vals) != 1:
            return False
        have, want = _label_int(value), _label_int(vals[0])
        if have is None or want is None:
            return False
        return have > want if op == "Gt" else have < want
    return False


def term_matches(term: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """A node selector term: expressions ANDed; an empty term matches nothing."""
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not exprs and not fields:
        return False
    labels = (node.get("metadata") or {}).get("labels") or {}
    if not all(requirement_matches(r, labels) for r in exprs):
        return False
    node_fields = {"metadata.name": (node.get("metadata") or {}).get("name")}
    for r in fields:
        if r.get("key") != "metadata.name" or r.get("operator") not in ("In", "NotIn"):
            return False
        if not requirement_matches(r, node_fields):
            return False
    return True


def node_affinity_matches(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """``nodeSelector`` (all pairs) AND required node affinity (terms ORed)."""
    spec = pod.get("spec") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    for k, v in (spec.get("nodeSelector") or {}).items():
        if labels.get(k) != v:
            return False
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if required is None:
        return True
    return any(term_matches(t, node) for t in required.get("nodeSelectorTerms") or [])


@dataclass(frozen=True)
class MessageStyle:
    """Wording choices that changed between Kubernetes releases.

    ``taint_details``: releases up to 1.34.1 name the taint
    (``node(s) had untolerated taint {sku: gpu}``); kubernetes/kubernetes pull 134740
    (1.35, cherry-picked to 1.34.2) replaced it with
    ``node(s) had untolerated taint(s)``.
    ``dra_postfilter``: with DynamicResourceAllocation enabled (GA in 1.34)
    its PostFilter runs before preemption and adds ``no new claims to
    deallocate, `` before ``preemption: ``.
    """

    taint_details: bool = True
    dra_postfilter: bool = False


class CyclePlugin(Protocol):
    """A filter plugin with state from its PreFilter for one pod (the scheduler's CycleState):
    ``volume_binding.PodVolumes`` (VolumeBinding and VolumeZone), the scheduler's DynamicResources."""

    @property
    def plugin(self) -> str:
        """The plugin named when its PreFilter rejects the pod."""

    @property
    def message(self) -> str | None:
        """Its PreFilter's rejection (UnschedulableAndUnresolvable for the whole pod), if any."""

    def filter(self, node: Mapping[str, Any]) -> Status | None: ...


def filter_node(pod: Mapping[str, Any], info: NodeInfo, requests: Mapping[str, int],
                style: MessageStyle = MessageStyle(), later: Sequence[CyclePlugin] = (),
                dra_backed: Collection[str] = ()) -> Status | None:
    """Run the filters in the default profile's order; ``None`` means the pod fits.

    ``later``: the filters after NodeResourcesFit, in the profile's order (VolumeBinding and
    VolumeZone, then DynamicResources).  ``dra_backed`` names the extended resources a DeviceClass
    maps (NodeResourcesFit leaves them to DRA on nodes whose allocatable lacks them, KEP-5004).
    """
    node = info.node
    spec = pod.get("spec") or {}
    tolerations = spec.get("tolerations") or []
    node_spec = node.get("spec") or {}
    # NodeUnschedulable
    if node_spec.get("unschedulable") and not any(
            toleration_tolerates(t, {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"})
            for t in tolerations):
        return Status("NodeUnschedulable", (ERR_UNSCHEDULABLE,), True)
    # NodeName
    wanted = spec.get("nodeName")
    if wanted and wanted != info.name:
        return Status("NodeName", (ERR_NODE_NAME,), True)
    # TaintToleration
    taint = untolerated_taint(node_spec.get("taints") or [], tolerations)
    if taint is not None:
        if style.taint_details:
            reason = f"node(s) had untolerated taint {{{taint.get('key', '')}: {taint.get('value') or ''}}}"
        else:
            reason = "node(s) had untolerated taint(s)"
        return Status("TaintToleration", (reason,), True)
    # NodeAffinity
    if not node_affinity_matches(pod, node):
        return Status("NodeAffinity", (ERR_AFFINITY,), True)
    # NodeResourcesFit
    reasons = insufficient_resources(requests, info, dra_backed)
    if reasons:
        return Status("NodeResourcesFit", tuple(reasons), False)
    for plugin in later:
        st = plugin.filter(node)
        if st is not None:
            return st
    return None


ERR_AFFINITY_CONFLICT = "pod affinity terms conflict"


def prefilter_node_names(pod: Mapping[str, Any]) -> set[str] | None:
    """NodeAffinity's PreFilter: the node names every required term pins with
    ``matchFields metadata.name In`` (intersected within a term, united across
    terms); ``None`` when some term does not pin names (all nodes eligible)."""
    required = ((((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if not required:
        return None
    names: set[str] | None = None
    for term in required.get("nodeSelectorTerms") or []:
        term_names: set[str] | None = None
        for r in term.get("matchFields") or []:
            if r.get("key") == "metadata.name" and r.get("operator") == "In":
                vals = set(r.get("values") or [])
                term_names = vals if term_names is None else term_names & vals
        if term_names is None:
            return None
        names = term_names if names is None else names | term_names
    return names


def evaluate(pod: Mapping[str, Any], nodes: Iterable[NodeInfo], requests: Mapping[str, int],
             style: MessageStyle = MessageStyle(), volumes: CyclePlugin | None = None, *,
             dra: CyclePlugin | None = None, dra_backed: Collection[str] = (),
             ) -> tuple[list[NodeInfo], dict[str, Status], str | None]:
    """One scheduling cycle's PreFilter + Filter over every node.

    Returns the feasible nodes, the rejecting status per node, and the
    PreFilter message when PreFilter rejected the pod outright.  PreFilter runs in the
    profile's order and stops at the first UnschedulableAndUnresolvable plugin
    (``RunPreFilterPlugins`` in ``framework/runtime/framework.go``): NodeAffinity, then the
    volume plugins (``volumes``), then DynamicResources (``dra``); on each node the filters
    after NodeResourcesFit run in the same order (see :func:`filter_node` for ``dra_backed``).
    Nodes a PreFilterResult leaves out get ``node(s) didn't satisfy plugin(s)
    [NodeAffinity]`` (``findNodesThatFitPod`` in ``schedule_one.go``).
    """
    nodes = list(nodes)
    later = [p for p in (volumes, dra) if p is not None]
    names = prefilter_node_names(pod)
    if names is not None and not names:
        st = Status("NodeAffinity", (), True)
        return [], {n.name: st for n in nodes}, ERR_AFFINITY_CONFLICT
    for plugin in later:
        if plugin.message:
            st = Status(plugin.plugin, (), True)
            return [], {n.name: st for n in nodes}, plugin.message
    feasible: list[NodeInfo] = []
    statuses: dict[str, Status] = {}
    skipped = Status("NodeAffinity", ("node(s) didn't satisfy plugin(s) [NodeAffinity]",), True)
    for info in nodes:
        if names is not None and info.name not in names:
            statuses[info.name] = skipped
            continue
        st = filter_node(pod, info, requests, style, later, dra_backed)
        if st is None:
            feasible.append(info)
        else:
            statuses[info.name] = st
    return feasible, statuses, None


def insufficient_resources(requests: Mapping[str, int], info: NodeInfo, dra_backed: Collection[str] = ()) -> list[str]:
    """``fitsRequest`` in ``plugins/noderesources/fit.go``: one reason per short resource; an
    extended resource the node does not have but a DeviceClass backs is DRA's to check."""
    alloc = info.allocatable()
    used = info.requested
    out: list[str] = []
    if len(info.pods) + 1 > alloc.get(PODS, 0):
        out.append(ERR_TOO_MANY_PODS)
    if not any(v for k, v in requests.items() if k != PODS):
        return out
    for name in (CPU, MEMORY, EPHEMERAL):
        want = requests.get(name, 0)
        if want > 0 and want > alloc.get(name, 0) - used.get(name, 0):
            out.append(f"Insufficient {name}")
    for name in sorted(requests):
        if name in (CPU, MEMORY, EPHEMERAL, PODS):
            continue
        want = requests[name]
        if name in dra_backed and name not in alloc:
            continue
        if want > 0 and want > alloc.get(name, 0) - used.get(name, 0):
            out.append(f"Insufficient {name}")
    return out


# ---------------------------------------------------------------------------
# scoring: pick one feasible node
# ---------------------------------------------------------------------------

# schedutil.DefaultMilliCPURequest / DefaultMemoryRequest, used for scoring
# pods that request nothing (pkg/scheduler/util/pod_resources.go)
_DEFAULT_MILLI_CPU = 100
_DEFAULT_MEMORY = 200 * 1024 * 1024


def least_allocated_score(requests: Mapping[str, int], info: NodeInfo) -> float:
    """NodeResourcesFit's LeastAllocated strategy over cpu and memory (weights 1),
    counting the pod being placed (``plugins/noderesources/least_allocated.go``)."""
    alloc = info.allocatable()
    total = 0.0
    for name, default in ((CPU, _DEFAULT_MILLI_CPU), (MEMORY, _DEFAULT_MEMORY)):
        cap = alloc.get(name, 0)
        want = requests.get(name, 0) or default
        used = info.requested.get(name, 0) + want
        if cap <= 0 or used > cap:
            continue
        total += (cap - used) * 100.0 / cap
    return total / 2


def pick_node(requests: Mapping[str, int], feasible: Iterable[NodeInfo]) -> NodeInfo | None:
    """Highest LeastAllocated score, ties broken by node name (the real
    scheduler breaks ties at random; the simulation stays deterministic)."""
    best: tuple[float, str] | None = None
    chosen = None
    for info in feasible:
        key = (-least_allocated_score(requests, info), info.name)
        if best is None or key < best:
            best, chosen = key, info
    return chosen


# ---------------------------------------------------------------------------
# the FailedScheduling message
# ---------------------------------------------------------------------------

NO_NODES = "no nodes available to schedule pods"  # ErrNoNodesAvailable (schedule_one.go)
PREEMPTION_NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"


def _histogram(reasons: Iterable[str]) -> str:
    counts: dict[str, int] = {}
    for r in reasons:
        counts[r] = counts.get(r, 0) + 1
    # sortReasonsHistogram: "<count> <reason>" strings in Go's sort.Strings order (bytewise)
    return ", ".join(sorted(f"{n} {r}" for r, n in counts.items()))


def fit_error_message(num_nodes: int, statuses: Mapping[str, Status], pod: Mapping[str, Any] | None = None,
                      style: MessageStyle = MessageStyle(), prefilter_message: str | None = None,
                      dra_postfilter: str | None = None) -> str:
    """The message of the FailedScheduling event and of the PodScheduled condition.

    ``0/N nodes are available: <histogram>.`` then the PostFilter part.  The
    preemption part counts nodes where a filter answered
    UnschedulableAndUnresolvable as "not helpful"; on the others the
    simulation finds no victims, because it does not preempt (all pods count
    as equal priority).  A pod with ``preemptionPolicy: Never`` is not
    eligible to preempt (``PodEligibleToPreemptOthers``).
    """
    if num_nodes == 0:
        return NO_NODES
    msg = f"0/{num_nodes} nodes are available:"
    if prefilter_message:
        # a PreFilter rejection replaces the per-node histogram (FitError.Error)
        msg += f" {prefilter_message}."
    else:
        hist = _histogram(r for st in statuses.values() for r in st.reasons)
        if hist:
            msg += f" {hist}."
    policy = ((pod or {}).get("spec") or {}).get("preemptionPolicy")
    if policy == "Never":
        post = "preemption: not eligible due to preemptionPolicy=Never."
    else:
        post_reasons = [PREEMPTION_NOT_HELPFUL if st.unresolvable else NO_VICTIMS for st in statuses.values()]
        post = f"preemption: 0/{num_nodes} nodes are available: {_histogram(post_reasons)}."
    if dra_postfilter:
        # the DynamicResources PostFilter runs first; the framework joins the reasons with ", "
        post = f"{dra_postfilter}, {post}"
    elif style.dra_postfilter:
        post = "no new claims to deallocate, " + post
    return f"{msg} {post}"
