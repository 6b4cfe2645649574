"""The culler's Prometheus metrics, served on its own port (``--metrics-port``).
Design notes: docs/culling.md.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

__all__ = ["CullMetrics"]


class CullMetrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.culled = Counter("gpuspawner_culled_servers", "GPU servers stopped by the culler, by pool and reason",
                              ["pool", "reason"], registry=r)
        self.gpu_hours = Counter("gpuspawner_culled_gpu_hours",
                                 "GPU-hours the stopped servers had provably held idle", ["pool"], registry=r)
        self.decisions = Gauge("gpuspawner_cull_decisions", "Decisions of the culler's last pass",
                               ["action", "reason"], registry=r)
        self.passes = Counter("gpuspawner_cull_passes", "Culler passes, by outcome", ["outcome"], registry=r)
        self.unusable = Gauge("gpuspawner_cull_unusable_series",
                              "GPU activity series of the culler's last pass that held bad samples", registry=r)
        self.last_pass = Gauge("gpuspawner_cull_last_pass_timestamp_seconds",
                               "When the culler's last pass ended (Unix time)", registry=r)

    def record_cull(self, pool: str | None, reason: str, gpu_hours: float) -> None:
        self.culled.labels(pool=pool or "", reason=reason).inc()
        self.gpu_hours.labels(pool=pool or "").inc(max(gpu_hours, 0.0))

    def record_pass(self, ok: bool, decisions: Iterable[tuple[str, str]], when: float, unusable: int = 0) -> None:
        self.decisions.clear()
        for (action, reason), n in collections.Counter(decisions).items():
            self.decisions.labels(action=action, reason=reason).set(n)
        self.unusable.set(unusable)
        self.passes.labels(outcome="ok" if ok else "failed").inc()
        self.last_pass.set(when)

    def serve(self, port: int, address: str = "0.0.0.0") -> None:
        start_http_server(port, addr=address, registry=self.registry)
