"""A GPU server's use right now, read from the culler's metric source, and when its idle rule would
stop it: what the home page shows each user of their own servers.  Pure.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from gpuspawner.cull.activity import (ACTIVITY_METRICS, BadSample, PodKey, check_sample, device_of, pod_of, show,
                                      to_fraction)
from gpuspawner.cull.idle_timeouts import AppliedRule
from gpuspawner.kube.times import format_duration

__all__ = ["FB_FREE", "FB_USED", "NOW_METRICS", "DeviceNow", "ServerNow", "instant_query", "readings",
           "server_now", "stop_words"]

# framebuffer memory in MiB (DCGM's field definitions, as the DCGM exporter's default counters name them)
FB_USED = "DCGM_FI_DEV_FB_USED"
FB_FREE = "DCGM_FI_DEV_FB_FREE"
NOW_METRICS = (*ACTIVITY_METRICS, FB_USED, FB_FREE)
#: the largest framebuffer read as a real one (MiB): 1 PiB; beyond it the sample is bad data
_MAX_MIB = float(1 << 30)
# a pod's name as Kubernetes allows it (a DNS subdomain): anything else is never put in a query
_POD_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


def instant_query(pods: Iterable[PodKey]) -> str | None:
    """The PromQL of one instant query for these pods' DCGM series (``exported_pod`` as Prometheus
    renames the exporter's ``pod`` without ``honor_labels``, else ``pod``); None: no usable pod name."""
    names = sorted({name for _ns, name in pods if _POD_NAME.fullmatch(name or "")})
    if not names:
        return None
    # RE2 in a PromQL string: "\\." is an escaped dot; pod names hold nothing else a regex reads
    alternatives = "|".join(name.replace(".", "\\\\.") for name in names)
    metrics = "|".join(NOW_METRICS)
    return " or ".join(f'{{__name__=~"{metrics}",{label}=~"{alternatives}"}}' for label in ("exported_pod", "pod"))


@dataclass(frozen=True)
class DeviceNow:
    """One GPU (or MIG slice) of a pod: how busy it is now and its memory, None where not reported."""
    device: str
    busy: float | None = None  # fraction of time busy (the higher of DCGM's two activity metrics)
    used_mib: float | None = None
    free_mib: float | None = None
    bad: str | None = None  # a sample of it was bad data: which


def _memory(metric: str, raw: object) -> float:
    if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
        raise BadSample(f"{show(raw)} is not a number")
    try:
        value = float(raw)
    except (ValueError, OverflowError):
        raise BadSample(f"{show(raw)} is not a number") from None
    if not math.isfinite(value) or not 0 <= value <= _MAX_MIB:
        raise BadSample(f"{show(raw)} is not a size in MiB")
    return value


def readings(doc: object) -> dict[PodKey, list[DeviceNow]] | str:
    """Each pod's devices from an instant query's answer (``resultType`` ``vector``), or why the answer
    cannot be read (a string).  A bad sample marks its device, never the others."""
    if not isinstance(doc, Mapping) or doc.get("status") != "success":
        error = doc.get("error") if isinstance(doc, Mapping) else None
        return f"Prometheus answered an error: {show(error or doc, 200)}"
    data = doc.get("data")
    if not isinstance(data, Mapping) or data.get("resultType") != "vector" or not isinstance(data.get("result"), list):
        return f"Prometheus answered no vector ({show(data, 80)})"
    devices: dict[tuple[PodKey, str], dict[str, object]] = {}
    for item in data["result"]:
        labels = item.get("metric") if isinstance(item, Mapping) else None
        if not isinstance(labels, Mapping) or not all(isinstance(k, str) and isinstance(v, str)
                                                      for k, v in labels.items()):
            return f"Prometheus answered a malformed series ({show(item, 80)})"
        pod, metric = pod_of(labels), labels.get("__name__")
        if pod is None or metric not in NOW_METRICS:
            continue
        value = item.get("value")
        slot = devices.setdefault((pod, device_of(labels)), {})
        try:
            if not isinstance(value, list) or len(value) != 2:
                raise BadSample(f"{show(value)} is not [time, value]")
            number = (_memory(metric, value[1]) if metric in (FB_USED, FB_FREE)
                      else to_fraction(metric, check_sample(metric, value[1])))
        except BadSample as e:
            slot.setdefault("bad", f"{metric}: {e}")
            continue
        key = "busy" if metric in ACTIVITY_METRICS else metric
        if key == "busy":
            slot["busy"] = max(number, slot.get("busy", 0.0))  # type: ignore[type-var]
        else:
            slot[key] = number
    out: dict[PodKey, list[DeviceNow]] = {}
    for (pod, device), slot in sorted(devices.items()):
        out.setdefault(pod, []).append(DeviceNow(device, slot.get("busy"), slot.get(FB_USED), slot.get(FB_FREE),
                                                 slot.get("bad")))  # type: ignore[arg-type]
    return out


@dataclass(frozen=True)
class ServerNow:
    """What a user reads of one server's GPUs now: each figure, or why it is not shown."""
    use: str  # "37%", "37% on average over 2 GPUs", or "not available: ..."
    memory: str  # "12.0 of 80.0 GiB", or "not available: ..."
    busy: bool | None  # at or above the noise floor now; None: unknown


def _gib(mib: float) -> str:
    return f"{mib / 1024:.1f}"


def server_now(devices: list[DeviceNow] | None, gpus: int, floor: float, unavailable: str | None = None) -> ServerNow:
    """One server's figures from its devices' readings (``unavailable``: why none could be read)."""
    if unavailable is not None:
        return ServerNow(f"not available ({unavailable})", f"not available ({unavailable})", None)
    if not devices:
        why = "not available (no GPU metrics for this server yet)"
        return ServerNow(why, why, None)
    bad = next((d.bad for d in devices if d.bad), None)
    if bad is not None:
        why = "not available (the GPU metrics hold bad data)"
        return ServerNow(why, why, None)
    partial = f" ({len(devices)} of its {gpus} GPUs reported)" if len(devices) < gpus else ""
    busy = [d.busy for d in devices if d.busy is not None]
    if len(busy) < len(devices):
        use, is_busy = "not available (no activity reported)", None
    else:
        mean = sum(busy) / len(busy)
        use = f"{round(mean * 100)}%" + (f" on average over {len(busy)} GPUs" if len(busy) > 1 else "") + partial
        is_busy = max(busy) >= floor
    mems = [(d.used_mib, d.free_mib) for d in devices]
    if any(used is None or free is None for used, free in mems):
        memory = "not available (no memory reported)"
    else:
        used = sum(u for u, _f in mems)  # type: ignore[misc]
        total = used + sum(f for _u, f in mems)  # type: ignore[misc]
        memory = f"{_gib(used)} of {_gib(total)} GiB" + partial
    return ServerNow(use, memory, is_busy)


def _at(t: datetime, now: datetime) -> str:
    return t.strftime("%H:%M UTC") if t.date() == now.date() else t.strftime("%d %b at %H:%M UTC").lstrip("0")


def stop_words(rule: AppliedRule, now: datetime, last_activity: datetime | None, started: datetime | None,
               busy: bool | None) -> str:
    """When the culler's rule would stop this server, in a user's words (times in UTC, aware datetimes).

    The culler stops a GPU server once both its notebook and its GPUs were idle for the whole idle
    timeout (``policy``), and any server older than the maximum age."""
    timeout = timedelta(seconds=rule.idle_timeout)
    span = format_duration(rule.idle_timeout)
    last = last_activity or started
    if busy:
        words = (f"Its GPUs are in use now, so it is not stopped as idle before {_at(now + timeout, now)} "
                 f"({span} without notebook or GPU use).")
    elif last is not None and last + timeout > now:
        words = (f"Stopped as idle at {_at(last + timeout, now)} at the earliest: {span} after its last notebook "
                 f"activity, if its GPUs stay idle too.")
    elif last is not None:
        words = (f"Stopped as idle once its GPUs have been idle for {span}: its notebook has not been used "
                 f"for {format_duration((now - last).total_seconds())}.")
    else:
        words = f"Stopped after {span} in which neither the notebook nor its GPUs were used."
    if rule.max_age and started is not None:
        words += f" Stopped at {_at(started + timedelta(seconds=rule.max_age), now)} in any case " \
                 f"(at most {format_duration(rule.max_age)} per server)."
    return words
