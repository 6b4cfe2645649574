"""GPU activity of each pod over a window, from DCGM exporter series.  Pure.
Design notes: docs/culling.md.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ACTIVITY_METRICS", "GPU_UTIL", "GR_ENGINE", "SAMPLE_RANGES", "BadSample", "DeviceActivity",
           "PodActivity", "SeriesWindow", "StepMaxima", "check_sample", "device_of", "pod_activity", "pod_of",
           "show", "to_fraction"]

GR_ENGINE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
ACTIVITY_METRICS = (GR_ENGINE, GPU_UTIL)
#: the values a sample of each metric can take (DCGM's field definitions: GR_ENGINE_ACTIVE is a
#: ratio, GPU_UTIL a percentage); anything else is bad data
SAMPLE_RANGES = {GR_ENGINE: (0.0, 1.0), GPU_UTIL: (0.0, 100.0)}

PodKey = tuple[str, str]  # (namespace, pod name)


class BadSample(ValueError):
    """A sample that is not a finite number in its metric's range; the message says what it was."""


def show(raw: Any, limit: int = 40) -> str:
    """A value as JSON would write it, cut to ``limit`` characters, for a log line (never raw text)."""
    try:
        text = json.dumps(raw)
    except (TypeError, ValueError):
        text = type(raw).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


def check_sample(metric: str, raw: Any) -> float:
    """A sample as a number: a finite one in the metric's range, else :class:`BadSample`.  Numbers
    and numeric strings (Prometheus writes values as strings) are read; nothing else is."""
    if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
        raise BadSample(f"{show(raw)} is not a number")
    try:
        value = float(raw)
    except (ValueError, OverflowError):
        raise BadSample(f"{show(raw)} is not a number") from None
    if not math.isfinite(value):
        raise BadSample(f"{show(raw)} is not a finite number")
    low, high = SAMPLE_RANGES.get(metric, (0.0, 1.0))
    if not low <= value <= high:
        raise BadSample(f"{show(raw)} is outside {low:g}..{high:g}")
    return value


def to_fraction(metric: str, value: float) -> float:
    """A sample as a fraction of the time the GPU was busy (GPU_UTIL is in percent)."""
    return value / 100.0 if metric == GPU_UTIL else value


def pod_of(labels: Mapping[str, str]) -> PodKey | None:
    """The pod a series belongs to: ``exported_pod``/``exported_namespace`` first, else ``pod``/``namespace``."""
    for pod, ns in (("exported_pod", "exported_namespace"), ("pod", "namespace")):
        if labels.get(pod):
            return labels.get(ns) or "", labels[pod]
    return None


def device_of(labels: Mapping[str, str]) -> str:
    """A device's identity: its host, GPU UUID (or index) and MIG GPU instance."""
    host = labels.get("Hostname") or labels.get("hostname") or ""
    gpu = labels.get("UUID") or labels.get("uuid") or f"gpu{labels.get('gpu', '?')}"
    instance = labels.get("GPU_I_ID")
    return f"{host}/{gpu}" + (f"/gi{instance}" if instance not in (None, "") else "")


@dataclass(frozen=True)
class SeriesWindow:
    """One series over one window: its highest value and whether samples cover the window."""
    metric: str
    labels: Mapping[str, str]
    peak: float | None  # highest fraction in the window's steps; None: no sample in them
    covered: bool
    why: str | None = None  # when not covered: what is missing
    unusable: str | None = None  # the series held bad samples: which (then it is not covered either)


@dataclass
class StepMaxima:
    """The per-step maxima (see the module's docstring) of one series' samples, and its bad ones.

    ``put(k, time, raw)`` adds a sample to step ``k`` (ignored outside ``0..n``); a sample that is
    not a usable number, or ``reject(why)`` (a point that is not a sample at all), makes the series
    unusable.  ``window(labels)`` judges the result."""
    metric: str
    start: float
    step: float
    n: int
    points: list[float | None] = field(init=False)
    bad: int = 0
    first_bad: str | None = None

    def __post_init__(self) -> None:
        self.points = [None] * (self.n + 1)

    def step_of(self, t: float) -> int:
        """The step holding raw time ``t``: ``(start+(k-1)*step, start+k*step]`` (-1: outside)."""
        x = -(-(t - self.start) // self.step)  # ceil
        return int(x) if math.isfinite(x) and 0 <= x <= self.n else -1

    def reject(self, why: str) -> None:
        self.bad += 1
        if self.first_bad is None:
            self.first_bad = why

    def put(self, k: int, t: Any, raw: Any) -> None:
        if not 0 <= k <= self.n:
            return
        try:
            value = check_sample(self.metric, raw)
        except BadSample as e:
            self.reject(f"{e} (at {show(t)})")
            return
        if self.points[k] is None or value > self.points[k]:
            self.points[k] = value

    def window(self, labels: Mapping[str, str]) -> SeriesWindow:
        body = [to_fraction(self.metric, v) for v in self.points[1:] if v is not None]
        peak = max(body) if body else None
        if self.first_bad is not None:
            more = f" and {self.bad - 1} more" if self.bad > 1 else ""
            why = f"{self.metric}: {self.first_bad}{more}"
            return SeriesWindow(self.metric, labels, peak, False, why, why)
        missing = [k for k, v in enumerate(self.points) if v is None]
        if not missing:
            return SeriesWindow(self.metric, labels, peak, True)
        if missing[0] == 0:
            why = "no samples from before the window began"
        else:
            k = missing[0]
            why = (f"no samples for {self.step:g}s at {self.start + (k - 1) * self.step:.0f}.."
                   f"{self.start + k * self.step:.0f} (epoch seconds)")
        return SeriesWindow(self.metric, labels, peak, False, why)


@dataclass(frozen=True)
class DeviceActivity:
    device: str
    peak: float | None  # highest activity of any of its series; None: none had a sample
    covered: bool  # some series covers the window
    shared_with: tuple[PodKey, ...] = ()  # other pods the device is reported for
    why: str | None = None
    unusable: str | None = None  # one of its series held bad samples: which


@dataclass(frozen=True)
class PodActivity:
    devices: tuple[DeviceActivity, ...]

    @property
    def peak(self) -> float | None:
        peaks = [d.peak for d in self.devices if d.peak is not None]
        return max(peaks) if peaks else None

    @property
    def unusable(self) -> DeviceActivity | None:
        """The first device whose series held bad samples (None: all were usable)."""
        return next((d for d in self.devices if d.unusable), None)


def _usable_peak(w: SeriesWindow) -> str | None:
    """Why a window's figures cannot be used (None: they can).  A source's own checks already
    catch bad samples; this catches a peak no check produced (another ``ActivitySource``)."""
    if w.unusable:
        return w.unusable
    if w.peak is not None and (isinstance(w.peak, bool) or not isinstance(w.peak, (int, float))
                               or not 0 <= w.peak <= 1):  # NaN fails the comparison too
        return f"{w.metric}: peak {show(w.peak)} is not a fraction from 0 to 1"
    return None


def pod_activity(windows: Iterable[SeriesWindow]) -> dict[PodKey, PodActivity]:
    """Each pod's devices over the window; series without a pod label are skipped (free GPUs)."""
    per_device: dict[tuple[PodKey, str], list[SeriesWindow]] = {}
    pods_of_device: dict[str, set[PodKey]] = {}
    for w in windows:
        pod = pod_of(w.labels)
        if pod is None:
            continue
        device = device_of(w.labels)
        per_device.setdefault((pod, device), []).append(w)
        pods_of_device.setdefault(device, set()).add(pod)
    out: dict[PodKey, list[DeviceActivity]] = {}
    for (pod, device), series in sorted(per_device.items()):
        unusable = next((why for why in map(_usable_peak, series) if why), None)
        peaks = [s.peak for s in series if s.peak is not None] if unusable is None else []
        covered = unusable is None and any(s.covered for s in series)
        why = None if covered else unusable or next((s.why for s in series if s.why), "no samples")
        others = tuple(sorted(pods_of_device[device] - {pod}))
        out.setdefault(pod, []).append(DeviceActivity(device, max(peaks) if peaks else None, covered, others, why,
                                                      unusable))
    return {pod: PodActivity(tuple(devs)) for pod, devs in out.items()}


class SourceError(Exception):
    """A metric source could not answer (Prometheus unreachable, a bad query); the message says why."""


def plan_steps(window: float, step: float, max_points: int = 10_000) -> tuple[float, int]:
    """``(step, n)`` for a window: ``n`` steps of ``step`` seconds cover it (Prometheus refuses range
    queries of more than 11,000 points per series, so the step grows to stay under ``max_points``)."""
    step = max(step, window / max_points, 0.001)
    return step, max(1, math.ceil(window / step - 1e-9))  # the epsilon: 2592000 / 259.2 is not quite 10000
