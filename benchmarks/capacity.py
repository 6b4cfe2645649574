"""Benchmark of the live GPU capacity cache and the spawn page it feeds: a script.

    .venv/bin/python benchmarks/capacity.py              # 5,000 GPU nodes, 150,000 pods
    .venv/bin/python benchmarks/capacity.py --quick      # 500 nodes, 15,000 pods

The cluster is built on the real control plane (``realcluster.py``: ``gpuspawner-cluster
controlplane``, ``bigcluster.py``'s objects applied by the bulk node agent, every bound pod
reported Running; the time to build it is printed), all in other processes, so that their work
does not pollute the event loop being measured; the fault proxy stands in front of the API
server with no fault set, counting this process's requests. This process plays the hub: it imports
what a hub imports, applies the garbage-collection policy the product ships (the config
snippet's ``gc.collect(); gc.freeze()`` after the imports, the cache's ``gc_freeze``; turn both
off with ``--no-gc-policy`` to compare), makes a ``GPUSpawner`` for a user of group ``ml``
with the demo's kind of config (CUDA image choices, allowed groups, a quota) and lets it start
the process's shared :class:`CapacityCache` through KubeSpawner's own Kubernetes client, over
real HTTP. It prints:

* cold sync time, and the event loop's worst stall during it (a ticker task that sleeps 5 ms
  and records how late it wakes up), wall clock with GC included, and apart: the loop's own
  CPU time and the collector's pauses;
* a spawn-page view timed as the hub runs it: ``GPUSpawner.get_options_form()`` (the capacity
  snapshot, the offers with each pool's CUDA fit for each image, the access rules, the form
  rendered), p50/p99/max over ``--views`` views while watch events stream in: as shipped
  (counts at most ``gpu_capacity_page_max_age`` old, offers and form remembered meanwhile,
  ``gpuspawner/hub/pagememo.py``), then rebuilt on every view (``gpu_capacity_page_max_age = 0``);
* API requests during those views, read from the fault proxy's counter (every request of this
  process passes it; the event stream's go straight to the API server) every 20 views: a view
  that made one would put one in every window, so the requests per view are the fewest a
  window saw, over its views; the totals, requests no view made included (watches renewed,
  for one), are given by verb and resource beside, with the lists and watches the cache's
  informers began meanwhile (requests the cache made of its own accord);
* a naive full recount per view (a fresh ledger from every record) as a baseline;
* cache memory: tracemalloc, current traced memory after a second cold sync minus before it
  (records, ledger; transient parse buffers freed).

Targets: 0 API requests per view, view p99 <= 10 ms (as shipped, and rebuilt every view), memory
<= 64 MiB, the whole loop's worst stall <= 25 ms (wall, GC included) in the cold sync and during
the views. The exit status is 1 when one is missed, 2 when the run itself failed.
``benchmarks/hub.py`` measures the same through a real JupyterHub.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
# KubeSpawner's client (which the cache shares) finds the cluster as in a hub: through KUBECONFIG,
# whose path kubernetes_asyncio reads when it is imported; the file is written once the cluster runs
KUBECONFIG = Path(tempfile.mkdtemp(prefix="gpuspawner-capbench-")) / "kubeconfig"
os.environ["KUBECONFIG"] = str(KUBECONFIG)

# imported up front, as in a hub (the config snippet imports the spawner, which imports these)
import kubernetes_asyncio.client  # noqa: E402,F401
from jupyterhub.objects import Hub  # noqa: E402
from traitlets.config import Config  # noqa: E402

from gpuspawner.capacity.cache import CapacityCache  # noqa: E402
from gpuspawner.capacity.plugin_accounts import PluginAccounts  # noqa: E402
from gpuspawner.hub.spawner import GPUSpawner  # noqa: E402
from hubprofiles import gpu_settings  # noqa: E402
from realcluster import RealCluster  # noqa: E402

TARGETS = {"api_requests_per_view": 0, "view_p99_ms": 10.0, "memory_mib": 64.0, "stall_ms": 25.0}
VIEW_WINDOW = 20  # views between two readings of the API request counts


# ---------------------------------------------------------------------------
# measuring (this process)


class StallMeter:
    """A ticker: how late does a 5 ms sleep wake up? The worst is the loop's longest stall.

    Wall clock, whatever the cause: the loop's own work, CPython's cyclic collector, or the
    process waiting for a core on a busy machine. Apart from it: the loop thread's CPU time
    over the worst tick (``time.thread_time``) and every collection's pause (``gc.callbacks``).
    """

    def __init__(self, period: float = 0.005) -> None:
        self.period = period
        self.worst = 0.0
        self.worst_cpu = 0.0
        self.samples: list[float] = []
        self.gc_pauses: list[tuple[int, float]] = []  # (generation, seconds)
        self._gc_started = 0.0
        self._task: asyncio.Task | None = None

    def _gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
        else:
            self.gc_pauses.append((info["generation"], time.perf_counter() - self._gc_started))

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            t, c = loop.time(), time.thread_time()
            await asyncio.sleep(self.period)
            late = loop.time() - t - self.period
            self.samples.append(late)
            self.worst = max(self.worst, late)
            self.worst_cpu = max(self.worst_cpu, time.thread_time() - c)

    def figures(self) -> dict[str, Any]:
        return {"stall_worst_ms": round(self.worst * 1000, 2), "stall_p99_ms": round(pct(self.samples, 0.99) * 1000, 2),
                "stall_worst_on_cpu_ms": round(self.worst_cpu * 1000, 2),
                "gc_collections": len(self.gc_pauses),
                "gc_full_collections": sum(1 for g, _ in self.gc_pauses if g == 2),
                "gc_worst_pause_ms": round(max((d for _, d in self.gc_pauses), default=0.0) * 1000, 2)}

    def __enter__(self) -> "StallMeter":
        gc.callbacks.append(self._gc)
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: Any) -> None:
        assert self._task is not None
        self._task.cancel()
        gc.callbacks.remove(self._gc)


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else 0.0


class Group:
    def __init__(self, name: str) -> None:
        self.name = name


class User:
    """What GPUSpawner reads of JupyterHub's user: a member of ``ml`` with no other server."""

    name = escaped_name = "bench"
    id = 1
    url = "/user/bench/"
    admin = False
    groups = [Group("ml")]
    spawners: dict = {}


def make_spawner(gc_policy: bool) -> GPUSpawner:
    config = Config()
    for name, value in gpu_settings().items():
        config.GPUSpawner[name] = value
    config.GPUSpawner.namespace = "jupyterhub"
    config.GPUSpawner.gpu_capacity_gc_freeze = gc_policy
    return GPUSpawner(config=config, user=User(), hub=Hub(), _mock=True)


async def cold_sync(spawner: GPUSpawner, cluster: RealCluster) -> tuple[CapacityCache, dict[str, Any]]:
    before = await asyncio.to_thread(cluster.requests)
    with StallMeter() as meter:
        t0 = time.perf_counter()
        cache = spawner.shared_capacity_cache()  # what the first view or spawn does
        ok = await cache.wait_synced(timeout=1800)
        sync_s = time.perf_counter() - t0
        await asyncio.sleep(0.05)  # the freeze after the sync, inside the measured stretch
    if not ok:
        raise RuntimeError(f"the cache did not sync: {cache.health}")
    h = cache.health
    out = {"cold_sync_s": round(sync_s, 3), "list_requests": await asyncio.to_thread(cluster.requests) - before,
           "gpu_nodes": h["gpu_nodes"], "gpu_pods_stored": h["gpu_pods"], "pools": len(cache.snapshot().pools),
           **meter.figures()}
    return cache, out


async def views(spawner: GPUSpawner, cache: CapacityCache, cluster: RealCluster, n: int, gap: float) -> dict[str, Any]:
    """``n`` views while events stream in. The API requests are read from the fault proxy every
    ``VIEW_WINDOW`` views: requests no view made (watches renewed, for one) come whatever the views
    do, so a long run of views sees a few; a view that made a request would put one in every window, so the requests
    per view are the fewest any whole window saw, over its views (the totals, by verb and
    resource, are given beside). ``benchmarks/hub.py`` counts them the same way."""
    for _ in range(5):  # templates compiled, verdicts remembered: as after a hub's first views
        await spawner.get_options_form()
    window = min(VIEW_WINDOW, n)
    began = informer_activity(cache)
    first = last = await asyncio.to_thread(cluster.requests_by_kind)
    windows: list[int] = []
    times: list[float] = []
    gens = set()
    with StallMeter() as meter:
        for i in range(1, n + 1):
            t = time.perf_counter()
            form = await spawner.get_options_form()
            times.append(time.perf_counter() - t)
            gens.add(cache.snapshot().generation)
            await asyncio.sleep(gap)
            if i % window == 0:
                now = await asyncio.to_thread(cluster.requests_by_kind)
                windows.append(sum((now - last).values()))
                last = now
    during = await asyncio.to_thread(cluster.requests_by_kind) - first
    activity = {k: v - began[k] for k, v in informer_activity(cache).items()}
    if "profile-item-gpu" not in form:
        raise RuntimeError("the spawn form has no GPU profile: the view timed is not the GPU view")
    return {"views": n, "view_p50_ms": round(pct(times, 0.5) * 1000, 3), "view_p99_ms": round(pct(times, 0.99) * 1000, 3),
            "view_max_ms": round(max(times) * 1000, 3), "generations_seen": len(gens),
            "api_requests_during_views": sum(during.values()),
            "api_requests_by_kind": {f"{verb} {resource}": c for (verb, resource), c in sorted(during.items())},
            "api_requests_windows": {"views": window, "n": len(windows), "fewest": min(windows),
                                     "without_any": windows.count(0)},
            "api_requests_per_view": min(windows) / window,
            "informer_activity": activity,
            "stall_worst_during_views_ms": meter.figures()["stall_worst_ms"],
            "form_bytes": len(form)}


def informer_activity(cache: CapacityCache) -> dict[str, int]:
    """What the cache's informers (nodes, pods, and DRA's) have begun so far: lists (a first list
    or a re-list, each of one or more pages), re-lists among them, and watches. Compared before
    and after the views, it tells the requests the cache made of its own accord from any other."""
    h = cache.health
    informers = [*h["informers"].values(), *(h.get("dra") or {}).get("informers", {}).values()]
    return {k: sum(i[k] for i in informers) for k in ("lists", "relists", "watches")}


def _requests(figures: dict[str, Any]) -> str:
    w = figures["api_requests_windows"]
    kinds = ", ".join(f"{c} {k}" for k, c in figures["api_requests_by_kind"].items()) or "none"
    a = figures["informer_activity"]
    return (f"{figures['api_requests_per_view']:g} per view (the fewest in a window of {w['views']} views; "
            f"{w['without_any']} of {w['n']} windows without any); in all {figures['api_requests_during_views']}: "
            f"{kinds} (counted by the fault proxy in front of the API server); the cache's informers meanwhile "
            f"began {a['lists']} lists ({a['relists']} re-lists) and {a['watches']} watches")


def naive_recount(cache: CapacityCache, n: int) -> float:
    """p50 seconds of rebuilding the ledger from every record (what an O(cluster) view would cost)."""
    accounts = cache._plugin.accounts
    nodes = [accounts._nodes[k] for k in accounts.node_names()]
    pods = list(accounts._pods.values())
    held = [(str(h), rec) for h, rec in accounts._base_pods.records()]  # pods without GPUs: their requests
    times = []
    for _ in range(n):
        t = time.perf_counter()
        led = PluginAccounts(cache.config.declared_pools)
        led.ledger.track(cache._ledger.tracked)
        for rec in nodes:
            led.upsert_node(rec)
        for rec in pods:
            led.upsert_pod(rec)
        for key, rec in held:
            led.upsert_base_pod(key, rec)
        led.ledger.pools()
        times.append(time.perf_counter() - t)
    return pct(times, 0.5)


async def memory(config: Any, page_size: int) -> dict[str, float]:
    """A second cold sync under tracemalloc (slower; not timed): what the cache retains."""
    tracemalloc.start()
    gc.collect()
    base = tracemalloc.get_traced_memory()[0]
    cache = CapacityCache(config, page_size=page_size)
    cache.start()
    assert await cache.wait_synced(timeout=1800)
    cache.snapshot()
    gc.collect()
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    await cache.stop()
    return {"cache_memory_mib": round((current - base) / 2**20, 2), "sync_peak_mib": round((peak - base) / 2**20, 2)}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    cluster = RealCluster(args.nodes, args.pods, args.gpu_share, args.seed)
    print(f"building the cluster on the real control plane: {args.nodes} GPU nodes, {args.pods} pods ...",
          flush=True)
    out: dict[str, Any] = {"nodes": args.nodes, "pods": args.pods, "gc_policy": not args.no_gc_policy,
                           "load_before": os.getloadavg()}
    try:
        built = await asyncio.to_thread(cluster.start)
        out["cluster_build"] = built
        print(f"  built in {built['build_s']} s (control plane {built['control_plane_s']} s, objects applied "
              f"{built['applied_s']} s, every bound pod Running {built['settled_s']} s after the agent started; "
              f"{cluster.built['gpu_pods']} GPU pods)", flush=True)
        cluster.hub_kubeconfig(KUBECONFIG)
        if not args.no_gc_policy:
            gc.collect()  # what the config snippet does once the hub's imports are done
            gc.freeze()
        spawner = make_spawner(not args.no_gc_policy)
        cache, synced = await cold_sync(spawner, cluster)
        out.update(synced)
        print(f"cold sync: {out['cold_sync_s']} s, {out['list_requests']} list requests; worst loop stall "
              f"{out['stall_worst_ms']} ms wall (p99 {out['stall_p99_ms']}), {out['stall_worst_on_cpu_ms']} ms on "
              f"the loop's CPU; GC: {out['gc_full_collections']} full collections, worst pause "
              f"{out['gc_worst_pause_ms']} ms", flush=True)
        cluster.stream(args.rate)
        await asyncio.sleep(0.5)
        out.update(await views(spawner, cache, cluster, args.views, args.view_gap))
        print(f"views (GPUSpawner.get_options_form, as shipped: counts at most "
              f"{spawner.gpu_capacity_page_max_age:g} s old): {args.views} while events stream in "
              f"({out['generations_seen']} generations seen): p50 {out['view_p50_ms']} ms, p99 "
              f"{out['view_p99_ms']} ms, max {out['view_max_ms']} ms; API requests: {_requests(out)}", flush=True)
        # the same views with the offers and the form rebuilt every time: what one rebuild costs
        spawner.gpu_capacity_page_max_age = 0
        rebuilt = await views(spawner, cache, cluster, args.views, args.view_gap)
        out.update({f"rebuild_{k}": v for k, v in rebuilt.items()})
        print(f"views rebuilt every time (gpu_capacity_page_max_age = 0): p50 {rebuilt['view_p50_ms']} ms, "
              f"p99 {rebuilt['view_p99_ms']} ms, max {rebuilt['view_max_ms']} ms; API requests: {_requests(rebuilt)}",
              flush=True)
        await asyncio.to_thread(cluster.pause)
        baseline = naive_recount(cache, args.baseline_views)
        out.update(naive_recount_p50_ms=round(baseline * 1000, 2),
                   naive_vs_view_p50=round(baseline * 1000 / max(out["view_p50_ms"], 1e-6), 1))
        print(f"baseline, a full recount of the ledger per view: p50 {out['naive_recount_p50_ms']} ms "
              f"({out['naive_vs_view_p50']}x a whole view)", flush=True)
        config = cache.config
        await CapacityCache.reset_shared()
        if not args.no_memory:
            out.update(await memory(config, args.page_size))
            print(f"cache memory: {out['cache_memory_mib']} MiB retained (peak during sync "
                  f"{out['sync_peak_mib']} MiB)", flush=True)
    finally:
        await asyncio.to_thread(cluster.stop)
        KUBECONFIG.unlink(missing_ok=True)
        KUBECONFIG.parent.rmdir()
    out["load_after"] = os.getloadavg()
    return out


def verdicts(out: dict[str, Any]) -> dict[str, bool]:
    v = {
        "api_requests_per_view": max(out["api_requests_per_view"], out["rebuild_api_requests_per_view"])
        <= TARGETS["api_requests_per_view"],
        "view_p99_ms": out["view_p99_ms"] <= TARGETS["view_p99_ms"],
        "rebuild_view_p99_ms": out["rebuild_view_p99_ms"] <= TARGETS["view_p99_ms"],
        # the whole loop's worst stall, wall clock with GC, in the cold sync and in steady state (the views)
        "stall_cold_sync_ms": out["stall_worst_ms"] <= TARGETS["stall_ms"],
        "stall_steady_ms": max(out["stall_worst_during_views_ms"], out["rebuild_stall_worst_during_views_ms"])
        <= TARGETS["stall_ms"],
    }
    if "cache_memory_mib" in out:
        v["memory_mib"] = out["cache_memory_mib"] <= TARGETS["memory_mib"]
    return v


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nodes", type=int, default=None, help="GPU nodes (default 5,000; 500 with --quick)")
    p.add_argument("--pods", type=int, default=None, help="pods (default 150,000; 15,000 with --quick)")
    p.add_argument("--gpu-share", type=float, default=0.15, help="share of pods that request GPUs")
    p.add_argument("--views", type=int, default=None, help="spawn-page views timed each way (default 2,000; "
                   "500 with --quick)")
    p.add_argument("--view-gap", type=float, default=0.002, help="seconds between views (events arrive meanwhile)")
    p.add_argument("--rate", type=float, default=200.0, help="watch events per second during the views")
    p.add_argument("--baseline-views", type=int, default=5)
    p.add_argument("--page-size", type=int, default=250)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--no-memory", action="store_true", help="skip the tracemalloc pass")
    p.add_argument("--no-gc-policy", action="store_true",
                   help="without the product's gc.freeze() (snippet and cache), to compare")
    p.add_argument("--quick", action="store_true",
                   help="500 nodes, 15,000 pods and 500 views, unless --nodes, --pods or --views say otherwise")
    p.add_argument("--json", action="store_true", help="print the results as JSON at the end")
    args = p.parse_args(argv)
    # --quick sets the sizes not given explicitly
    for name, full, quick in (("nodes", 5000, 500), ("pods", 150_000, 15_000), ("views", 2000, 500)):
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    if args.nodes < 1 or args.pods < 0 or args.views < 1:
        p.error("--nodes and --views must be >= 1, --pods >= 0")
    try:
        out = asyncio.run(run(args))
    except Exception as e:  # noqa: BLE001 - the run itself failed: say why, exit 2
        print(f"capacity benchmark: the run failed: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    met = verdicts(out)
    out["targets_met"] = met
    print(f"load average {out['load_before'][0]:.2f} at the start, {out['load_after'][0]:.2f} at the end "
          f"({os.cpu_count()} CPUs)")
    print("targets: " + ", ".join(f"{k} {'met' if v else 'MISSED'}" for k, v in met.items()))
    if args.json:
        print(json.dumps(out, indent=2))
    return 0 if all(met.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
