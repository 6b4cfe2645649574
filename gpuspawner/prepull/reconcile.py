"""The pre-puller's loop: makes the cluster's pre-pull DaemonSets match the plan, surviving API errors."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpuspawner.kube.api_errors import explain, status_of
from gpuspawner.prepull.plan import COMPONENT, MANAGED_BY, SPEC_ANNOTATION, PoolPull

#: The label selector of every DaemonSet the pre-puller owns.
SELECTOR = f"{MANAGED_BY[0]}={MANAGED_BY[1]},{COMPONENT[0]}={COMPONENT[1]}"


class DaemonSets(Protocol):
    """The four calls the reconciler makes in the hub's namespace (``KubeDaemonSets``)."""

    async def list(self) -> dict[str, str | None]:
        """Name -> spec digest annotation of each DaemonSet matching :data:`SELECTOR`."""

    async def create(self, manifest: dict[str, Any]) -> None: ...

    async def replace(self, manifest: dict[str, Any]) -> None: ...

    async def delete(self, name: str) -> None: ...


def error_text(e: BaseException) -> str:
    """An error in a log line's words: a failed API call by its Status (code, reason, the server's
    message; not the answer's headers, whose Date changes every second), else its type and text."""
    code = getattr(e, "status", None)
    if isinstance(code, int) and not isinstance(code, bool) and code >= 400:
        return explain(status_of(code, getattr(e, "body", None)))
    return f"{type(e).__name__}: {e}".strip()


@dataclass(frozen=True)
class Changes:
    """What one pass did, by DaemonSet name."""

    created: tuple[str, ...] = ()
    replaced: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.created or self.replaced or self.deleted)

    def describe(self) -> str:
        parts = [f"{verb} {', '.join(names)}" for verb, names in
                 (("created", self.created), ("updated", self.replaced), ("removed", self.deleted)) if names]
        return "; ".join(parts) or "no change"


async def reconcile(api: DaemonSets, wanted: Mapping[str, PoolPull]) -> Changes:
    """One pass: create what is missing, replace what is outdated, delete what no pool wants."""
    existing = await api.list()
    created, replaced, deleted = [], [], []
    for name, pull in sorted(wanted.items()):
        digest = pull.manifest["metadata"]["annotations"][SPEC_ANNOTATION]
        if name not in existing:
            await api.create(pull.manifest)
            created.append(name)
        elif existing[name] != digest:
            await api.replace(pull.manifest)
            replaced.append(name)
    for name in sorted(set(existing) - set(wanted)):
        await api.delete(name)
        deleted.append(name)
    return Changes(tuple(created), tuple(replaced), tuple(deleted))


@dataclass
class Prepuller:
    """Runs :func:`reconcile` every ``interval`` seconds with the plan ``source`` gives.

    ``source`` returns the wanted DaemonSets and any problems (``plan.plan``), or None while the
    capacity is unknown (then nothing is touched: a pool missing from an unhealthy snapshot must
    not lose its DaemonSet). An API error is logged once per distinct message (``error_text``) and retried with
    backoff (``interval`` doubling to ``max_backoff``, with jitter); it never ends the loop."""

    api: DaemonSets
    source: Callable[[], Awaitable[tuple[Mapping[str, PoolPull], list[str]] | None]]
    log: logging.Logger | logging.LoggerAdapter = field(default_factory=lambda: logging.getLogger(__name__))
    interval: float = 30.0
    max_backoff: float = 300.0
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    rand: Callable[[], float] = random.random
    _last_error: str | None = None
    _reported: frozenset[str] = frozenset()
    passes: int = 0

    async def run_once(self) -> Changes | None:
        """One pass; None when the source had no plan."""
        got = await self.source()
        if got is None:
            return None
        wanted, problems = got
        if set(problems) != self._reported:
            for problem in sorted(set(problems) - self._reported):
                self.log.warning("gpuspawner pre-pull: %s", problem)
            self._reported = frozenset(problems)
        changes = await reconcile(self.api, wanted)
        self.passes += 1
        if changes:
            self.log.info("gpuspawner pre-pull: %s", changes.describe())
        return changes

    async def run(self) -> None:
        """Pass after pass until cancelled."""
        delay = self.interval
        while True:
            try:
                await self.run_once()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the API, the plan's source: never end the loop
                text = error_text(e)
                if text != self._last_error:
                    self.log.error("gpuspawner pre-pull failed (retrying with backoff): %s", text)
                    self._last_error = text
                delay = min(delay * 2, self.max_backoff)
                await self.sleep(delay * (0.5 + self.rand() / 2))
                continue
            if self._last_error is not None:
                self.log.info("gpuspawner pre-pull works again")
                self._last_error = None
            delay = self.interval
            await self.sleep(self.interval)
