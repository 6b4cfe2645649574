"""The home page's "Your GPU servers": each running GPU server's model, count and pool, its GPU use and
memory now (from the Prometheus server the culler reads) and when the idle rule would stop it."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from gpuspawner.cull.activity import PodKey, SourceError
from gpuspawner.cull.now import DeviceNow, instant_query, readings, server_now, stop_words
from gpuspawner.cull.idle_timeouts import DEFAULT_NOISE_FLOOR, rule_for
from gpuspawner.kube import objects
from gpuspawner.spawn.pending_verdicts import GPUS_ANNOTATION, POOL_ANNOTATION
from gpuspawner.spawn.profiles import present_pools

log = logging.getLogger(__name__)

HOME_VAR = "gpuspawner_gpu_servers"
#: the longest the home page waits for Prometheus
TIMEOUT = 3.0
#: how long one answer serves the views of the same servers
MEMO_SECONDS = 10.0

_clock = time.monotonic  # a seam for tests
_memo: dict[tuple[str, str], tuple[float, dict[PodKey, list[DeviceNow]] | str]] = {}


@dataclass(frozen=True)
class GpuServer:
    """One running GPU server of the user, as the hub knows it (no Kubernetes or metrics call)."""
    name: str  # "" for the default server
    pool_id: str
    pool_name: str | None  # the name its spawn showed (None after a hub restart: the pod's annotations)
    gpus: int
    pod: PodKey
    profile: str | None
    last_activity: datetime | None
    started: datetime | None


def _aware(t: Any) -> datetime | None:
    if not isinstance(t, datetime):
        return None
    return t if t.tzinfo is not None else t.replace(tzinfo=timezone.utc)  # JupyterHub keeps naive UTC


def gpu_server(spawner: Any) -> GpuServer | None:
    """The GPU server a spawner runs (None: not active, or no GPUs): its spawn's pool, else the pool its
    pod's annotations name (a server that ran before the hub restarted)."""
    if not getattr(spawner, "active", False):
        return None
    info = getattr(spawner, "_gpu_spawn", None)
    if info is not None:
        pool_id, pool_name, gpus = info.pool_id, info.pool_name, info.gpus
    else:
        find = getattr(spawner, "_reflected_pod", None)
        annotations = objects.section(objects.section(find() if find else None, "metadata"), "annotations")
        pool_id, pool_name = annotations.get(POOL_ANNOTATION), None
        try:
            gpus = int(annotations.get(GPUS_ANNOTATION, ""))
        except ValueError:
            return None
    if not isinstance(pool_id, str) or not pool_id or gpus <= 0:
        return None
    options = spawner.user_options if isinstance(getattr(spawner, "user_options", None), Mapping) else {}
    orm = getattr(spawner, "orm_spawner", None)
    return GpuServer(
        name=spawner.name or "", pool_id=pool_id, pool_name=pool_name, gpus=gpus,
        pod=(str(getattr(spawner, "namespace", "")), str(getattr(spawner, "pod_name", ""))),
        profile=options.get("profile") if isinstance(options.get("profile"), str) else None,
        last_activity=_aware(getattr(orm, "last_activity", None)), started=_aware(getattr(orm, "started", None)),
    )


def user_gpu_servers(user: Any) -> list[GpuServer]:
    spawners = user.all_spawners() if hasattr(user, "all_spawners") else getattr(user, "spawners", {}).values()
    return [s for s in map(gpu_server, spawners) if s is not None]


def pool_names(settings: Any) -> dict[str, tuple[str, str]]:
    """pool id -> (model, the pool's name users see) from the capacity cache's snapshot (in memory)."""
    try:
        snapshot = settings.shared_capacity_cache().snapshot()
        return {pool.id: (pool.display_name, name) for pool, name in present_pools(snapshot.pools, settings.pool_rules())}
    except Exception as e:  # the page lists the servers by what the hub knows of them
        log.warning("The home page's GPU servers are shown without pool names: %s: %s", type(e).__name__, e)
        return {}


def _group(pool_id: str) -> str:
    group = pool_id.split(":", 1)[0]
    return group if group and group != "*" else "the cluster's"


def pool_label(pool_id: str, names: Mapping[str, tuple[str, str]]) -> str:
    """A pool as users read it: its name on the spawn page, else its node group (never its raw id)."""
    known = names.get(pool_id)
    return known[1] if known is not None else _group(pool_id)


def rows(servers: Iterable[GpuServer], names: Mapping[str, tuple[str, str]],
         found: Mapping[PodKey, list[DeviceNow]] | str | None, rules: Any, now: datetime) -> list[dict[str, Any]]:
    """What the page shows of each server. ``found``: the pods' readings, or why there are none (a
    string; None: no metrics source configured). ``rules``: the culler's (None: not configured)."""
    floor = rules.noise_floor if rules is not None else DEFAULT_NOISE_FLOOR
    out = []
    for s in servers:
        model, pool = names.get(s.pool_id, (s.pool_name or "GPU", s.pool_name or _group(s.pool_id)))
        if found is None:
            figures = server_now(None, s.gpus, floor, "the hub reads no GPU metrics")
        elif isinstance(found, str):
            figures = server_now(None, s.gpus, floor, "the GPU metrics could not be read")
        else:
            figures = server_now(found.get(s.pod), s.gpus, floor)
        stop = None
        if rules is not None:
            stop = stop_words(rule_for(rules, s.profile, s.pool_id), now, s.last_activity, s.started, figures.busy)
        out.append({
            "name": s.name, "gpus": f"{s.gpus} \u00d7 {model}", "pool": pool if pool != model else _group(s.pool_id),
            "use": figures.use, "memory": figures.memory, "stop": stop,
        })
    return out


async def read_now(url: str, pods: Iterable[PodKey], timeout: float = TIMEOUT
                   ) -> dict[PodKey, list[DeviceNow]] | str:
    """The pods' devices now, from Prometheus at ``url``, or why they could not be read (a string)."""
    from gpuspawner.cull.prometheus import PrometheusSource

    query = instant_query(pods)
    if query is None:
        return {}
    hit = _memo.get((url, query))
    if hit is not None and _clock() - hit[0] < MEMO_SECONDS:
        return hit[1]
    source = PrometheusSource(url, timeout=timeout)
    try:
        answer: dict[PodKey, list[DeviceNow]] | str = readings(await source.instant(query))
    except SourceError as e:
        answer = str(e)
    finally:
        await source.close()
    if isinstance(answer, str):
        log.warning("The home page shows no GPU use: %s", answer)
    if len(_memo) > 1000:
        _memo.clear()
    _memo[(url, query)] = (_clock(), answer)
    return answer


class HomeServers:
    """The template variable's value for one view: ``await load()`` reads what the section shows."""

    def __init__(self, settings_of: Callable[[], Any], user: Any):
        self.settings_of = settings_of
        self.user = user

    async def load(self) -> dict[str, Any] | None:
        """``{"servers": [...], "note": str | None}``, None when the user runs no GPU server. Never raises:
        what cannot be read is said on the page."""
        try:
            servers = user_gpu_servers(self.user)
            if not servers:
                return None
            settings = self.settings_of()
            url = settings.gpu_prometheus_url
            found = await read_now(url, [s.pod for s in servers]) if url else None
            note = None
            if found is None:
                note = "GPU use is not shown: this hub reads no GPU metrics."
            elif isinstance(found, str):
                note = "GPU use cannot be read right now; it is shown again once the metrics answer."
            return {"servers": rows(servers, pool_names(settings), found, settings.cull_rules(),
                                    datetime.now(timezone.utc)), "note": note}
        except Exception as e:
            log.warning("The home page's GPU servers could not be shown: %s: %s", type(e).__name__, e)
            return None


def home_vars(settings_of: Callable[[], Any]) -> Callable[[Any], HomeServers | None]:
    """The template variable's callable: ``user -> HomeServers`` (JupyterHub calls it on each page; the
    work is in ``load``, which only the home page awaits)."""

    def gpu_servers(user: Any) -> HomeServers | None:
        return HomeServers(settings_of, user) if user is not None else None

    return gpu_servers


def _hub_settings() -> Any:
    from gpuspawner.hub.gpu_hours_page import hub_settings

    return hub_settings()


#: the template variable's callable the config snippet registers
home_gpu_servers = home_vars(_hub_settings)
