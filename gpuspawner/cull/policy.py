"""One server, one decision: stop it, keep it, or leave it alone.  Pure.
Design notes: docs/culling.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import Enum

from gpuspawner.cull.activity import PodActivity, show
from gpuspawner.cull.idle_timeouts import AppliedRule, CullRules
from gpuspawner.cull.servers import Server
from gpuspawner.kube.times import format_duration

__all__ = ["Action", "Decision", "GpuVerdict", "decide", "judge_gpus"]


class Action(str, Enum):
    CULL = "cull"
    KEEP = "keep"
    SKIP = "skip"  # not the culler's to judge (CPU-only, pending, not ready)


# the bounded reasons (label values of gpuspawner_culled_servers_total and words of the log)
IDLE, MAX_AGE = "idle", "max_age"
ACTIVE, GPU_BUSY, NO_METRICS, PARTIAL_METRICS = "jupyter_active", "gpu_busy", "no_metrics", "partial_metrics"
UNUSABLE_METRICS = "metrics_unusable"
EXEMPT, GROUPS_UNKNOWN, NO_POD, NO_TIMES = "exempt", "groups_unknown", "no_pod", "no_activity_time"
CPU_ONLY, PENDING, NOT_READY = "cpu_only", "pending", "not_ready"


@dataclass(frozen=True)
class GpuVerdict:
    idle: bool | None  # True idle, False busy, None unknown
    reason: str  # GPU_BUSY, NO_METRICS, PARTIAL_METRICS, UNUSABLE_METRICS or IDLE
    text: str


@dataclass(frozen=True)
class Decision:
    server: Server
    action: Action
    reason: str
    message: str
    idle_seconds: float = 0.0  # how long both signals were provably idle (GPU-hours = gpus * this)

    @property
    def gpu_hours(self) -> float:
        return self.server.gpus * self.idle_seconds / 3600.0


def _shared_note(activity: PodActivity) -> str:
    shared = sorted({f"{ns}/{p}" for d in activity.devices for ns, p in d.shared_with})
    return f"; shared GPU, device-wide values, also reported for {', '.join(shared)}" if shared else ""


def judge_gpus(activity: PodActivity | None, gpus: int, floor: float, window: float,
               error: str | None = None) -> GpuVerdict:
    """Whether a server's ``gpus`` GPUs were idle over ``window`` seconds (see the module's rule);
    ``error``: the metric source could not be read, so nothing is known."""
    span = format_duration(window)
    if error is not None:
        return GpuVerdict(None, NO_METRICS, f"GPU metrics unavailable: {error}")
    if activity is None or not activity.devices:
        return GpuVerdict(None, NO_METRICS, "no GPU metrics for its pod (is the DCGM exporter running on its "
                                            "node, and does Prometheus scrape it?)")
    bad = activity.unusable
    if bad is not None:  # bad data is no evidence, whatever the other devices show
        return GpuVerdict(None, UNUSABLE_METRICS, f"GPU metrics unusable: {bad.unusable} ({show(bad.device, 120)})")
    note = _shared_note(activity)
    peak = activity.peak
    if peak is not None and peak >= floor:
        return GpuVerdict(False, GPU_BUSY, f"GPU busy: peak {peak:.3f} >= noise floor {floor:g} in the last "
                                           f"{span}{note}")
    if len(activity.devices) < gpus:
        return GpuVerdict(None, PARTIAL_METRICS, f"metrics for {len(activity.devices)} of its {gpus} GPUs")
    gaps = [d for d in activity.devices if not d.covered]
    if gaps:
        return GpuVerdict(None, PARTIAL_METRICS, f"GPU metrics do not cover the last {span}: {gaps[0].why} "
                                                 f"({gaps[0].device})")
    return GpuVerdict(True, IDLE, f"GPUs idle: peak {peak or 0:.3f} < {floor:g} over the last {span}{note}")


def _not_judged(server: Server, rules: CullRules) -> tuple[Action, str, str] | None:
    if server.gpus <= 0:
        return Action.SKIP, CPU_ONLY, "CPU-only server: left to the hub's idle culler"
    if server.pending:
        return Action.SKIP, PENDING, f"{server.pending} pending"
    if not server.ready:
        return Action.SKIP, NOT_READY, "not ready"
    if rules.exempt_groups:
        if server.groups is None:
            return Action.KEEP, GROUPS_UNKNOWN, ("exempt groups are configured but the user's groups are not "
                                                 "visible: grant the culler the read:users:groups scope")
        exempt = sorted(server.groups & rules.exempt_groups)
        if exempt:
            return Action.KEEP, EXEMPT, f"member of exempt group {exempt[0]}"
    if server.pod is None:
        return Action.KEEP, NO_POD, ("its pod was not found (no admin:server_state scope and no "
                                     "Kubernetes pod with its hub.jupyter.org annotations)")
    return None


def decide(server: Server, activity: PodActivity | None, rule: AppliedRule, rules: CullRules,
           now: datetime, metrics_error: str | None = None) -> Decision:
    """The decision for one server at ``now`` (see the module's docstring)."""
    early = _not_judged(server, rules)
    if early is not None:
        return Decision(server, *early)
    gpu = judge_gpus(activity, server.gpus, rules.noise_floor, rule.idle_timeout, metrics_error)
    last = server.last_activity or server.started
    inactive = (now - last).total_seconds() if last else None
    idle = min(inactive, rule.idle_timeout) if gpu.idle and inactive is not None else 0.0
    age = (now - server.started).total_seconds() if server.started else None
    if rule.max_age and age is not None and age >= rule.max_age:
        return Decision(server, Action.CULL, MAX_AGE, f"running for {format_duration(age)} >= maximum age "
                                                      f"{format_duration(rule.max_age)}; {gpu.text}", idle)
    if inactive is None:
        return Decision(server, Action.KEEP, NO_TIMES, "the hub reports neither last_activity nor started")
    timeout = f"timeout {format_duration(rule.idle_timeout)} ({rule.timeout_from})"
    jupyter = f"Jupyter activity {format_duration(inactive)} ago"
    if inactive < rule.idle_timeout:
        return Decision(server, Action.KEEP, ACTIVE, f"{jupyter} < {timeout}; {gpu.text}")
    if gpu.idle:
        return Decision(server, Action.CULL, IDLE, f"{jupyter} and {gpu.text}; {timeout}", idle)
    return Decision(server, Action.KEEP, gpu.reason, f"{gpu.text}; {jupyter}; {timeout}")
