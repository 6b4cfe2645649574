"""One culling pass: read the hub's servers, their pods and GPU activity; decide; stop.
Design notes: docs/culling.md.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Protocol

from gpuspawner.cull.activity import PodActivity, SeriesWindow, SourceError, device_of, pod_activity, pod_of, show
from gpuspawner.cull.budget import budget_users, spent
from gpuspawner.cull.hub import HubClient, HubError
from gpuspawner.cull.kube import KubeError
from gpuspawner.cull.culler_metrics import CullMetrics
from gpuspawner.cull.policy import NO_METRICS, PARTIAL_METRICS, UNUSABLE_METRICS, Action, Decision, decide
from gpuspawner.cull.idle_timeouts import CullRules, rule_for
from gpuspawner.cull.servers import Server, pod_index, servers_from_users
from gpuspawner.kube.times import format_duration

__all__ = ["ActivitySource", "Culler", "utcnow"]

log = logging.getLogger("gpuspawner.cull")


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def _where(w: SeriesWindow) -> str:
    """A series' pod and device, quoted (label values come from the metric source)."""
    pod = pod_of(w.labels)
    return f"{show('/'.join(pod), 120) if pod else 'no pod'} on {show(device_of(w.labels), 120)}"


class ActivitySource(Protocol):
    async def windows(self, window: float, now: float) -> list[SeriesWindow]: ...


@dataclass
class Culler:
    hub: HubClient
    source: ActivitySource
    rules: CullRules
    list_server_pods: Callable[[], Awaitable[list[dict[str, Any]]]] | None = None
    metrics: CullMetrics | None = None
    dry_run: bool = False
    concurrency: int = 10
    clock: Callable[[], datetime] = utcnow
    budgets: bool = True  # stop servers whose GPU-hour budget the hub says is spent (gpu_hour_stop_when_spent)

    async def _activity(self, servers: list[Server], now: datetime
                        ) -> tuple[dict[float, dict | str], bool, int]:
        """window -> {pod: PodActivity}, or the source's error text; whether all windows were read;
        how many series held bad samples."""
        windows = {rule_for(self.rules, s.profile, s.pool).idle_timeout for s in servers if s.gpus > 0}
        out: dict[float, dict | str] = {}
        ok, unusable = True, 0
        for window in sorted(windows):
            try:
                series = await self.source.windows(window, now.timestamp())
            except SourceError as e:
                log.error("GPU activity unavailable: %s", e)
                out[window], ok = str(e), False
                continue
            except Exception as e:  # a source that fails in a way it does not know: still no evidence
                log.error("GPU activity unavailable: the source failed: %s: %s", type(e).__name__, e)
                out[window], ok = f"the metric source failed ({type(e).__name__})", False
                continue
            bad = [w for w in series if w.unusable]
            if bad:
                unusable += len(bad)
                log.warning("GPU activity over the last %s: %d of %d series hold bad samples, their servers are "
                            "kept [%s]; first: %s of %s", format_duration(window), len(bad), len(series),
                            UNUSABLE_METRICS, bad[0].unusable, _where(bad[0]))
            out[window] = pod_activity(series)
        return out, ok, unusable

    async def _servers(self) -> tuple[list[Server], bool]:
        users = await self.hub.ready_users()
        pods: list[dict[str, Any]] = []
        ok = True
        if self.list_server_pods is not None:
            try:
                pods = await self.list_server_pods()
            except KubeError as e:
                log.error("server pods unavailable (servers without state are kept): %s", e)
                ok = False
        return servers_from_users(users, pod_index(pods)), ok

    def _decide(self, server: Server, activity: dict[float, dict | str], now: datetime) -> Decision:
        rule = rule_for(self.rules, server.profile, server.pool)
        got = activity.get(rule.idle_timeout)
        pods: dict = got if isinstance(got, dict) else {}
        act: PodActivity | None = pods.get(server.pod) if server.pod else None
        return decide(server, act, rule, self.rules, now, got if isinstance(got, str) else None)

    async def _stop(self, d: Decision, gate: asyncio.Semaphore) -> bool:
        async with gate:
            try:
                status = await self.hub.stop(d.server.user, d.server.name)
            except HubError as e:
                log.error("could not stop %s: %s", d.server.label, e)
                return False
        if self.metrics is not None and status != 404:
            self.metrics.record_cull(d.server.pool, d.reason, d.gpu_hours)
        log.debug("stop %s: hub answered %d", d.server.label, status)
        return True

    async def _spent(self, decisions: list[Decision], now: datetime) -> list[Decision]:
        """The decisions, with a stop for each GPU server whose user's GPU-hour budget is spent (the hub
        says so only with ``gpu_hour_stop_when_spent``). A hub that cannot answer keeps the servers."""
        if not self.budgets:
            return decisions
        usages = {}
        for user in budget_users(d.server for d in decisions):
            try:
                usages[user] = await self.hub.gpu_usage(user)
            except HubError as e:
                log.warning("GPU-hour budgets not checked (servers are not stopped for them): %s", e)
                if "HTTP 401" in str(e) or "HTTP 403" in str(e):
                    self.budgets = False  # the token lacks custom:gpu-usage:read: not asked again
                return decisions
        return [spent(d.server, usages.get(d.server.user), now) or d for d in decisions]

    def _log(self, d: Decision) -> None:
        s = d.server
        what = {Action.CULL: "would cull" if self.dry_run else "cull", Action.KEEP: "keep", Action.SKIP: "skip"}
        level = logging.DEBUG if d.action is Action.SKIP else logging.INFO
        log.log(level, "%s %s (pod %s, %d GPU%s, pool %s): %s [%s]", what[d.action], s.label,
                "/".join(s.pod) if s.pod else "?", s.gpus, "" if s.gpus == 1 else "s", s.pool or "-",
                d.message, d.reason)

    async def run_pass(self) -> bool:
        try:
            return await self._pass()
        except Exception as e:  # a pass never ends the culler: it fails, and the next one runs
            log.error("pass failed, the rest of it skipped (no server stopped after this point): %s: %s",
                      type(e).__name__, e)
            if self.metrics is not None:
                self.metrics.record_pass(False, [], self.clock().timestamp())
            return False

    async def _pass(self) -> bool:
        now = self.clock()
        try:
            servers, ok = await self._servers()
        except HubError as e:
            log.error("cannot list the hub's servers: %s", e)
            if self.metrics is not None:
                self.metrics.record_pass(False, [], now.timestamp())
            return False
        activity, read_ok, unusable = await self._activity(servers, now)
        decisions = await self._spent([self._decide(s, activity, now) for s in servers], now)
        for d in decisions:
            self._log(d)
        stops = [d for d in decisions if d.action is Action.CULL]
        if stops and not self.dry_run:
            gate = asyncio.Semaphore(self.concurrency)
            results = await asyncio.gather(*(self._stop(d, gate) for d in stops))
            ok = ok and all(results)
        kinds = [("would_cull" if self.dry_run and d.action is Action.CULL else d.action.value, d.reason)
                 for d in decisions]
        if self.metrics is not None:
            self.metrics.record_pass(ok and read_ok, kinds, self.clock().timestamp(), unusable)
        blind = sum(d.reason in (NO_METRICS, PARTIAL_METRICS, UNUSABLE_METRICS) for d in decisions)
        log.info("pass done: %d servers, %d %s, %d kept (%d of them for want of usable GPU metrics)",
                 len(decisions), len(stops), "would be stopped" if self.dry_run else "stopped",
                 sum(d.action is Action.KEEP for d in decisions), blind)
        return ok and read_ok
