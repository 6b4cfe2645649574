"""GPU activity of each pod over a window, from DCGM exporter series.  Pure.

**Metrics.**  ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` (the ratio of time the
graphics engine was busy; reported per MIG instance) and
``DCGM_FI_DEV_GPU_UTIL`` (percent; not reported for MIG).  Both are read
when both are present, as fractions, and the device's activity is the
higher: the profiling counter can read 0 where profiling is unavailable or
taken by a profiler, while utilisation still moves, and any sign of work
keeps a server.

**Pods.**  The exporter labels a device's series with the pod holding it
(``pod``, ``namespace``).  When Prometheus scrapes the exporter and attaches
its own target labels (the exporter pod's ``pod``, ``namespace``) without
``honor_labels``, the exporter's become ``exported_pod`` and
``exported_namespace``; those are read first.  A device is
``UUID``/``uuid`` + ``GPU_I_ID`` (MIG instance) on its ``Hostname``.

**Windows.**  A source reports, per series, the highest value in each of
``n`` consecutive steps of ``step`` seconds ending now, plus one step just
before the window: ``points[k]`` is the maximum over
``(start + (k-1)*step, start + k*step]`` for ``k = 0..n`` (``start = now - n*step``),
or None when the step had no sample.  Prometheus computes exactly this with
``max_over_time(m[step])`` in a range query; the direct scraper from its own
samples (:func:`points_from_samples`).  The window is **covered** only when
every step, the one before it too, has a sample: the series existed when the
window began and no gap is longer than one step.  A series that is missing
or has a gap never counts as idle.

**Shared GPUs.**  On a time-sliced (or MPS) GPU, DCGM's values are the
device's, whoever uses it.  An exporter with ``KUBERNETES_VIRTUAL_GPUS``
repeats the device's series for every pod sharing it; without it, one
sharing pod gets the series and the others none.  So: a device reported for
several pods is marked shared; its activity is device-wide, so a busy shared
device keeps every pod on it, and an idle one is idle for all of them (no
one used it); a pod whose device is not reported for it at all has missing
metrics and is kept.  A server is never stopped because a neighbour's use of
its GPU is invisible to it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

__all__ = ["ACTIVITY_METRICS", "GPU_UTIL", "GR_ENGINE", "DeviceActivity", "PodActivity", "SeriesWindow",
           "device_of", "pod_activity", "pod_of", "points_from_samples", "to_fraction", "window_from_points"]

GR_ENGINE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
ACTIVITY_METRICS = (GR_ENGINE, GPU_UTIL)

PodKey = tuple[str, str]  # (namespace, pod name)


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


def points_from_samples(samples: Iterable[tuple[float, float]], start: float, step: float, n: int
                        ) -> list[float | None]:
    """The per-step maxima (see the module's docstring) of raw ``(time, value)`` samples."""
    points: list[float | None] = [None] * (n + 1)
    for t, v in samples:
        k = int(-(-(t - start) // step))  # ceil: step k holds (start+(k-1)*step, start+k*step]
        if 0 <= k <= n and (points[k] is None or v > points[k]):
            points[k] = v
    return points


def window_from_points(metric: str, labels: Mapping[str, str], points: Sequence[float | None], start: float,
                       step: float) -> SeriesWindow:
    """A ``SeriesWindow`` from per-step maxima; ``points[0]`` is the step before the window."""
    body = [to_fraction(metric, v) for v in points[1:] if v is not None]
    peak = max(body) if body else None
    missing = [k for k, v in enumerate(points) if v is None]
    if not missing:
        return SeriesWindow(metric, labels, peak, True)
    if missing[0] == 0:
        why = "no samples from before the window began"
    else:
        k = missing[0]
        why = f"no samples for {step:g}s at {start + (k - 1) * step:.0f}..{start + k * step:.0f} (epoch seconds)"
    return SeriesWindow(metric, labels, peak, False, why)


@dataclass(frozen=True)
class DeviceActivity:
    device: str
    peak: float | None  # highest activity of any of its series; None: none had a sample
    covered: bool  # some series covers the window
    shared_with: tuple[PodKey, ...] = ()  # other pods the device is reported for
    why: str | None = None


@dataclass(frozen=True)
class PodActivity:
    devices: tuple[DeviceActivity, ...]

    @property
    def peak(self) -> float | None:
        peaks = [d.peak for d in self.devices if d.peak is not None]
        return max(peaks) if peaks else None


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
        peaks = [s.peak for s in series if s.peak is not None]
        covered = any(s.covered for s in series)
        why = None if covered else next((s.why for s in series if s.why), "no samples")
        others = tuple(sorted(pods_of_device[device] - {pod}))
        out.setdefault(pod, []).append(DeviceActivity(device, max(peaks) if peaks else None, covered, others, why))
    return {pod: PodActivity(tuple(devs)) for pod, devs in out.items()}


class SourceError(Exception):
    """A metric source could not answer (Prometheus unreachable, a bad query); the message says why."""


def plan_steps(window: float, step: float, max_points: int = 10_000) -> tuple[float, int]:
    """``(step, n)`` for a window: ``n`` steps of ``step`` seconds cover it (Prometheus refuses range
    queries of more than 11,000 points per series, so the step grows to stay under ``max_points``)."""
    step = max(step, window / max_points, 0.001)
    return step, max(1, math.ceil(window / step - 1e-9))  # the epsilon: 2592000 / 259.2 is not quite 10000
