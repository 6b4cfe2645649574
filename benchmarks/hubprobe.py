"""A loop-lag probe inside a JupyterHub process, for ``benchmarks/hub.py``.

``benchmarks/hub_config.py`` calls :func:`install` from the hub's config file, while
JupyterHub's event loop already runs (``JupyterHub.launch_instance`` loads the config inside
``IOLoop.run_sync``). The probe is a task that sleeps 5 ms and records how late it wakes up:
the worst lateness is the loop's longest stall, wall clock, whatever caused it (the hub's own
work, the capacity cache, CPython's cyclic garbage collector, or waiting for a core on a busy
machine). A ``gc.callbacks`` hook records every collection's pause and generation, so the
report can say how much of a stall was the collector; the worst tick's CPU time on the loop and
the host's ``steal`` meanwhile (``/proc/stat``) say whether the hub was working at all.
``GET /hub/bench/probe`` (registered in ``c.JupyterHub.extra_handlers``, no authentication:
loopback only, benchmark only) answers with the figures since the last ``?reset=1`` and the
process's resident memory; ``?objects=1`` adds the number of objects the collector tracks (and
the most numerous of their types) and
``?collect=1`` runs a full collection (both stall the loop themselves, so they are asked for
only after the stall figures).

Not part of gpuspawner: the benchmark installs it next to the product, as an admin's own
config would add a handler.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import gc
import importlib.util
import inspect
import json
import os
import sys
import threading
import time
import traceback
from typing import Any, Callable

from tornado import web

PERIOD = 0.005
# the product's own source files (not a checkout's or a virtualenv's that happen to sit in a
# directory called gpuspawner): where a task's coroutine is defined says whose step it is
_PRODUCT = os.path.join(os.path.dirname(os.path.abspath(importlib.util.find_spec("gpuspawner").origin)), "")


class StolenTime:
    """The time the machine's host kept its cores from it (``steal`` in Linux's ``/proc/stat``: a
    virtual machine's vCPUs not run), in seconds per core since boot; 0 where it cannot be read.
    Read through one open descriptor: a few microseconds, cheap enough for every tick."""

    def __init__(self, path: str = "/proc/stat") -> None:
        try:
            self._fd: int | None = os.open(path, os.O_RDONLY)
        except OSError:
            self._fd = None
        self._per_core_tick = 1.0 / (os.sysconf("SC_CLK_TCK") * (os.cpu_count() or 1))

    def seconds(self) -> float:
        if self._fd is None:
            return 0.0
        try:
            os.lseek(self._fd, 0, os.SEEK_SET)
            # "cpu  user nice system idle iowait irq softirq steal ...": all cores together
            return int(os.read(self._fd, 256).split(b"\n", 1)[0].split()[8]) * self._per_core_tick
        except (OSError, ValueError, IndexError):
            return 0.0


def rss_bytes() -> int:
    """Resident set size of this process (Linux ``/proc/self/statm``), 0 elsewhere."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return 0
    return pages * os.sysconf("SC_PAGE_SIZE")


class LoopProbe:
    """How late a 5 ms sleep wakes up, and how long each garbage collection took."""

    def __init__(self, period: float = PERIOD) -> None:
        self.period = period
        self.task: asyncio.Task | None = None
        self._gc_started = 0.0
        self._gc_total = 0.0
        self._tick_started = 0.0
        self._stolen = StolenTime()
        self.reset()

    def reset(self) -> None:
        self.since = time.time()
        self.worst = 0.0
        self.worst_at = 0.0
        self.worst_on_cpu = 0.0
        # the worst tick: (wall, on the loop's CPU, in GC, the host's steal per core meanwhile)
        self.worst_parts = (0.0, 0.0, 0.0, 0.0)
        self.lates: list[float] = []
        self.gc_pauses: list[tuple[int, float]] = []
        self.timings: dict[str, list[float]] = {}
        # the tick running now spans the probe's own request (whose figures, sorting and JSON
        # stall the loop too): it belongs to no phase, so it is not counted
        self._discard_tick = True

    def _gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
        else:
            pause = time.perf_counter() - self._gc_started
            self._gc_total += pause
            self.gc_pauses.append((info["generation"], pause))

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            t, cpu, in_gc, stolen = loop.time(), time.thread_time(), self._gc_total, self._stolen.seconds()
            self._tick_started = time.perf_counter()
            await asyncio.sleep(self.period)
            self._tick_started = 0.0
            late = loop.time() - t - self.period
            if self._discard_tick:
                self._discard_tick = False
                continue
            # the loop thread's CPU time over the same tick: work done on the loop, apart from
            # time spent waiting for a core on a busy machine (both are a stall users feel)
            on_cpu = time.thread_time() - cpu
            self.lates.append(late)
            if late > self.worst:
                self.worst, self.worst_at = late, time.time()
                self.worst_parts = (late, on_cpu, self._gc_total - in_gc, self._stolen.seconds() - stolen)
            self.worst_on_cpu = max(self.worst_on_cpu, on_cpu)

    def timed(self, label: str, func: Callable) -> Callable:
        """``func`` (sync or async), recording each call's duration under ``label``."""
        if inspect.iscoroutinefunction(func):
            @functools.wraps(func)
            async def wrapper(*args: Any, **kw: Any) -> Any:
                t = time.perf_counter()
                try:
                    return await func(*args, **kw)
                finally:
                    self.timings.setdefault(label, []).append(time.perf_counter() - t)
        else:
            @functools.wraps(func)
            def wrapper(*args: Any, **kw: Any) -> Any:
                t = time.perf_counter()
                try:
                    return func(*args, **kw)
                finally:
                    self.timings.setdefault(label, []).append(time.perf_counter() - t)
        return wrapper

    def start(self) -> None:
        gc.callbacks.append(self._gc)
        self.task = asyncio.get_running_loop().create_task(self._run(), name="bench-loop-probe")

    def figures(self) -> dict[str, Any]:
        lates = sorted(self.lates)
        full = [d for g, d in self.gc_pauses if g == 2]
        return {
            "since": self.since,
            "samples": len(lates),
            "worst_stall_ms": round(self.worst * 1000, 2),
            "worst_stall_at": self.worst_at,
            "worst_on_cpu_ms": round(self.worst_on_cpu * 1000, 2),
            "worst_stall_parts_ms": {k: round(v * 1000, 2)
                                     for k, v in zip(("wall", "on_cpu", "gc", "steal"), self.worst_parts)},
            "p99_stall_ms": round(lates[min(len(lates) - 1, int(0.99 * len(lates)))] * 1000, 2) if lates else 0.0,
            "gc_collections": len(self.gc_pauses),
            "gc_full_collections": len(full),
            "gc_worst_pause_ms": round(max((d for _, d in self.gc_pauses), default=0.0) * 1000, 2),
            "gc_worst_full_pause_ms": round(max(full, default=0.0) * 1000, 2),
            "rss_bytes": rss_bytes(),
            "timings": {k: _summary(v) for k, v in self.timings.items()},
        }


def _summary(values: list[float]) -> dict[str, float]:
    s = sorted(values)

    def q(f: float) -> float:
        return round(s[min(len(s) - 1, int(f * len(s)))] * 1000, 3)

    return {"n": len(s), "p50_ms": q(0.5), "p99_ms": q(0.99), "max_ms": round(s[-1] * 1000, 3)}


class StallSampler:
    """Where the loop is while a tick is late: a thread samples the loop thread's stack every
    2 ms once a tick has run 12 ms, and counts the stacks (``?stacks=1`` on the probe's URL)."""

    def __init__(self, probe: LoopProbe, every: float = 0.002, after: float = 0.012) -> None:
        self.probe, self.every, self.after = probe, every, after
        self.loop_thread = threading.get_ident()
        self.counts: collections.Counter = collections.Counter()
        threading.Thread(target=self._run, name="bench-stall-sampler", daemon=True).start()

    def _run(self) -> None:
        while True:
            time.sleep(self.every)
            began = self.probe._tick_started
            if not began or time.perf_counter() - began < self.after:
                continue
            frame = sys._current_frames().get(self.loop_thread)
            if frame is not None:
                stack = traceback.extract_stack(frame)[-12:]
                self.counts[" <- ".join(f"{os.path.basename(f.filename)}:{f.lineno} {f.name}"
                                        for f in reversed(stack))] += 1

    def top(self, n: int = 15) -> list[tuple[int, str]]:
        return [(count, stack) for stack, count in self.counts.most_common(n)]


class SlowSteps:
    """Which callbacks of the loop ran long: every ``Handle._run`` is timed, and one over
    ``threshold`` is counted under what it ran (a task's coroutine, or the callback's function),
    with where that task was left waiting afterwards: exact attribution of a stall, which the
    sampler above only sees at the points where the loop's thread lets go of the GIL.

    The longest step of each kind is kept too (``longest``): ``gpuspawner`` (a task whose
    coroutine is gpuspawner's: the capacity cache's informers, the spawn form), ``request`` (a
    request handler's step: JupyterHub's authentication, database and page work, with whatever
    handler code it runs, e.g. ``GET /hub/api/gpus``'s) and ``other``."""

    KINDS = ("gpuspawner", "request", "other")

    def __init__(self, threshold: float = 0.012) -> None:
        self.threshold = threshold
        self.counts: collections.Counter = collections.Counter()
        self.worst: dict[str, float] = {}
        self.longest: dict[str, float] = dict.fromkeys(self.KINDS, 0.0)
        self.longest_without_gc: dict[str, float] = dict.fromkeys(self.KINDS, 0.0)
        run = asyncio.events.Handle._run
        steps = self

        def timed_run(handle: asyncio.events.Handle) -> None:
            # the task's frame, kept: a request handler's task ends in the step, and its
            # request is named from the frame's `self` afterwards
            task = getattr(handle._callback, "__self__", None)  # type: ignore[attr-defined]
            frame = getattr(task.get_coro(), "cr_frame", None) if isinstance(task, asyncio.Task) else None
            t, in_gc = time.perf_counter(), PROBE._gc_total
            try:
                run(handle)
            finally:
                took = time.perf_counter() - t
                if took > 0.001:
                    kind = steps.kind(task, frame)
                    steps.longest[kind] = max(steps.longest[kind], took)
                    # the same step without the collector's pauses in it (the collector walks
                    # what every part of the process allocated, whoever's step triggers it)
                    own = took - (PROBE._gc_total - in_gc)
                    steps.longest_without_gc[kind] = max(steps.longest_without_gc[kind], own)
                if took > steps.threshold:
                    steps.record(handle, took, frame)

        asyncio.events.Handle._run = timed_run  # type: ignore[method-assign]

    @staticmethod
    def kind(task: Any, frame: Any) -> str:
        if frame is None:
            return "other"
        code = frame.f_code
        if code.co_filename == __file__ and code.co_name == "wrapper":
            # the probe's own timing wrapper (time_method) around a product method, such as the
            # spawn form's coroutine, which JupyterHub runs as a task: the step is the method's
            code = getattr(frame.f_locals.get("func"), "__code__", code)
        if code.co_filename.startswith(_PRODUCT):
            return "gpuspawner"
        return "request" if code.co_name == "_execute" else "other"

    @staticmethod
    def describe(handle: asyncio.events.Handle) -> str:
        callback = handle._callback  # type: ignore[attr-defined]
        task = getattr(callback, "__self__", None)
        if isinstance(task, asyncio.Task):
            coro = task.get_coro()
            where = ""
            while coro is not None:  # the innermost coroutine it now awaits
                frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
                if frame is not None:
                    where = f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno} {frame.f_code.co_name}"
                coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
            return f"task {getattr(task.get_coro(), '__qualname__', task.get_name())} (then waiting at {where})"
        func = getattr(callback, "__func__", callback)
        return f"callback {getattr(func, '__module__', '')}.{getattr(func, '__qualname__', repr(func))}"

    def record(self, handle: asyncio.events.Handle, took: float, frame: Any = None) -> None:
        what = self.describe(handle)
        request = getattr(frame.f_locals.get("self"), "request", None) if frame is not None else None
        # a request handler's request (a task of another kind may have a `request` method)
        if isinstance(getattr(request, "method", None), str) and isinstance(getattr(request, "path", None), str):
            what += f" {request.method} {request.path}"
        self.counts[what] += 1
        self.worst[what] = max(self.worst.get(what, 0.0), took)

    def top(self, n: int = 15) -> list[tuple[int, float, str]]:
        return [(count, round(self.worst[what] * 1000, 1), what) for what, count in self.counts.most_common(n)]


PROBE = LoopProbe()
SAMPLER: StallSampler | None = None
SLOW: SlowSteps | None = None


class ProbeHandler(web.RequestHandler):
    """``GET /hub/bench/probe[?reset=1][&collect=1]``: the probe's figures as JSON."""

    def get(self) -> None:
        out = PROBE.figures()
        if self.get_argument("stacks", "") and SAMPLER is not None:
            out["stall_stacks"] = SAMPLER.top()
        if SLOW is not None:  # since the last reset, as the stall figures
            out["slow_steps"] = SLOW.top()
            out["longest_step_ms"] = {k: round(v * 1000, 2) for k, v in SLOW.longest.items()}
            out["longest_step_without_gc_ms"] = {k: round(v * 1000, 2) for k, v in SLOW.longest_without_gc.items()}
        # these two stall the loop themselves: ask for them only after the stall figures are taken
        if self.get_argument("objects", ""):
            tracked = gc.get_objects()  # not the frozen ones: what a full collection walks
            out["gc_tracked_objects"] = len(tracked)
            # by type, the most numerous first: what has piled up since the last gc.freeze()
            out["gc_tracked_types"] = collections.Counter(
                f"{type(o).__module__}.{type(o).__qualname__}" for o in tracked).most_common(12)
            del tracked
            out["gc_frozen_objects"] = gc.get_freeze_count()  # walks the permanent generation
        if self.get_argument("collect", ""):
            gc.collect()
            out["rss_bytes_after_collect"] = rss_bytes()
        if self.get_argument("reset", ""):
            PROBE.reset()
            if SLOW is not None:
                SLOW.counts.clear()
                SLOW.worst.clear()
                SLOW.longest = dict.fromkeys(SLOW.KINDS, 0.0)
                SLOW.longest_without_gc = dict.fromkeys(SLOW.KINDS, 0.0)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(out))


def install(c: Any, stall_stacks: bool = False) -> None:
    """Start the probe on the running loop (and the stall sampler) and register its handler
    in the hub config ``c``."""
    global SAMPLER, SLOW
    if PROBE.task is None:
        PROBE.start()
        SLOW = SlowSteps()
        if stall_stacks:
            SAMPLER = StallSampler(PROBE)
    c.JupyterHub.extra_handlers.append((r"/bench/probe", ProbeHandler))


def time_method(cls: Any, name: str, label: str) -> None:
    """Record the duration of every call of ``cls.name`` (a class or module: the product's own share of a request)."""
    setattr(cls, name, PROBE.timed(label, getattr(cls, name)))
