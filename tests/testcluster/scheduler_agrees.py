"""The capacity model against the real kube-scheduler: random clusters, one question per case.

``python -m tests.testcluster.scheduler_agrees --cases 2000 --seed S`` starts a control plane,
prints the agreement and each disagreement, and exits 1 below 99.9% (docs/test-cluster.md).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import random
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio.client.rest import ApiException

from gpuspawner.capacity.cache import CapacityCache
from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.capacity.dra_objects import claim_record
from gpuspawner.capacity.pod_requests import base_record, pod_record
from gpuspawner.spawn import dra_claim as spawn_dra
from gpuspawner.spawn.overrides import build_overrides
from gpuspawner.spawn.profiles import GPUProfileSpec, build_offers
from gpuspawner.spawn.resource_requests import profile_requests
from gpuspawner.spawn.tolerations import DEFAULT_TOLERATED_TAINT_KEYS
from tests.builders import randcluster
from tests.builders.dra import device_class

SERVERS_NS = "sched-agrees-servers"
LEASE_NS = "kube-node-lease"
DECIDE_SECONDS = 15.0
TARGET = 0.999


@dataclass(frozen=True)
class Outcome:
    case: str
    model: bool
    scheduler: bool | None  # None: no decision within DECIDE_SECONDS
    detail: str

    @property
    def agrees(self) -> bool:
        return self.model == self.scheduler


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Harness:
    """One API client to the control plane; loads clusters and runs cases on them."""

    def __init__(self, kubeconfig: str) -> None:
        self.kubeconfig = kubeconfig
        self.api: k8s.ApiClient | None = None

    async def __aenter__(self) -> Harness:
        conf = k8s.Configuration()
        await k8s_config.load_kube_config(config_file=str(self.kubeconfig), client_configuration=conf)
        self.conf = conf
        self.api = k8s.ApiClient(conf)
        self.core = k8s.CoreV1Api(self.api)
        self.res = k8s.ResourceV1Api(self.api)
        self.coord = k8s.CoordinationV1Api(self.api)
        for ns in (SERVERS_NS, randcluster.OTHER_NS):
            await self._ignore_exists(self.core.create_namespace({"metadata": {"name": ns}}))
        for name, kind in ((randcluster.NVIDIA, "gpu"), ("mig.nvidia.com", "mig")):
            await self._ignore_exists(self.res.create_device_class(device_class(name, device_type=kind)))
        for ns in (SERVERS_NS, randcluster.OTHER_NS):  # pods need the namespace's default service account
            await self._until(lambda ns=ns: self._exists(self.core.read_namespaced_service_account("default", ns)),
                              30, f"the default service account of {ns}")
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.api.close()

    @staticmethod
    async def _ignore_exists(coro: Any) -> None:
        try:
            await coro
        except ApiException as e:
            if e.status != 409:
                raise

    @staticmethod
    async def _exists(coro: Any) -> bool:
        try:
            await coro
            return True
        except ApiException as e:
            if e.status == 404:
                return False
            raise

    @staticmethod
    async def _until(check: Any, timeout: float, what: str) -> None:
        end = time.monotonic() + timeout
        while True:
            if await check():
                return
            if time.monotonic() > end:
                raise TimeoutError(f"{what}: not within {timeout} s")
            await asyncio.sleep(0.02)

    # -- clusters ---------------------------------------------------------------------------

    async def load(self, c: randcluster.Cluster) -> None:
        """Create the cluster's objects; return once every node is Ready and untainted by the control plane."""
        for node in c.nodes:
            name = node["metadata"]["name"]
            await self.core.create_node({k: v for k, v in node.items() if k != "status"})
            await self._post_status(name, node["status"])
            await self.coord.create_namespaced_lease(LEASE_NS, self._lease(name))
        for s in c.slices:
            await self.res.create_resource_slice(s)
        for claim in c.claims:
            made = await self.res.create_namespaced_resource_claim(
                randcluster.OTHER_NS, {k: v for k, v in claim.items() if k != "status"})
            made.status = claim["status"]
            await self.res.replace_namespaced_resource_claim_status(
                claim["metadata"]["name"], randcluster.OTHER_NS, self.api.sanitize_for_serialization(made))
        for pod in c.pods:
            await self.core.create_namespaced_pod(randcluster.OTHER_NS, pod)

        async def settled() -> bool:
            nodes = (await self.core.list_node(label_selector=randcluster.SELECTOR)).items
            return len(nodes) == len(c.nodes) and not any(
                t.key.startswith("node.kubernetes.io/not-ready") for n in nodes for t in (n.spec.taints or ()))

        await self._until(settled, 60, "the nodes' not-ready taints to go")

    async def _post_status(self, name: str, status: dict) -> None:
        """What a kubelet posts once registered: capacity, allocatable and Ready (again on a conflict
        with the node lifecycle controller's own update)."""
        for _ in range(20):
            node = await self.core.read_node(name)
            node.status = k8s.V1NodeStatus(
                capacity=status["capacity"], allocatable=status["allocatable"],
                conditions=[k8s.V1NodeCondition(type="Ready", status="True", reason="KubeletReady",
                                                last_heartbeat_time=_now(), last_transition_time=_now())])
            try:
                await self.core.replace_node_status(name, node)
                return
            except ApiException as e:
                if e.status != 409:
                    raise
        raise RuntimeError(f"node {name}: its status kept conflicting")

    def _lease(self, node: str) -> dict:
        return {"metadata": {"name": node, "namespace": LEASE_NS, "labels": dict([randcluster.MARK])},
                "spec": {"holderIdentity": node, "leaseDurationSeconds": 40, "renewTime": _now()}}

    async def renew_leases(self) -> None:
        """What each node's kubelet does every 10 s: renew its Lease (the node lifecycle controller's heartbeat)."""
        while True:
            await asyncio.sleep(8)
            for lease in (await self.coord.list_namespaced_lease(LEASE_NS, label_selector=randcluster.SELECTOR)).items:
                lease.spec.renew_time = _now()
                try:
                    await self.coord.replace_namespaced_lease(lease.metadata.name, LEASE_NS, lease)
                except ApiException as e:
                    if e.status not in (404, 409):
                        raise

    async def unload(self) -> None:
        """Delete the last cluster (the test's own namespaces' pods and claims, and the nodes, slices and
        leases it labelled) and wait until it is gone."""
        for ns in (SERVERS_NS, randcluster.OTHER_NS):
            await self.core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
            await self.res.delete_collection_namespaced_resource_claim(ns)
            await self.res.delete_collection_namespaced_resource_claim_template(ns)
        await self.res.delete_collection_resource_slice(label_selector=randcluster.SELECTOR)
        await self.coord.delete_collection_namespaced_lease(LEASE_NS, label_selector=randcluster.SELECTOR)
        await self.core.delete_collection_node(label_selector=randcluster.SELECTOR)

        async def gone() -> bool:
            return not (await self.core.list_node(label_selector=randcluster.SELECTOR)).items and not any(
                [(await self.core.list_namespaced_pod(ns)).items for ns in (SERVERS_NS, randcluster.OTHER_NS)])

        await self._until(gone, 60, "the last cluster's nodes and pods to go")

    async def counts(self, config: CapacityConfig) -> tuple[int, int, int]:
        """What a capacity cache should hold now: GPU pods, bound pods without GPUs, ResourceClaims."""
        pods = self.api.sanitize_for_serialization((await self.core.list_pod_for_all_namespaces()).items)
        claims = self.api.sanitize_for_serialization(
            (await self.res.list_resource_claim_for_all_namespaces()).items)
        gpu = [p for p in pods if pod_record(p, config.is_gpu_resource) is not None]
        base = [p for p in pods if pod_record(p, config.is_gpu_resource) is None and base_record(p) is not None]
        return len(gpu), len(base), sum(claim_record(c) is not None for c in claims)

    # -- cases ------------------------------------------------------------------------------

    async def decide(self, pod: dict, template: dict | None) -> tuple[bool | None, str]:
        """Create the server's pod (and claim template); True when kube-scheduler binds it, False when
        it reports it Unschedulable; then delete what was created and wait until it has gone."""
        name = pod["metadata"]["name"]
        if template is not None:
            await self._ignore_exists(self.res.create_namespaced_resource_claim_template(SERVERS_NS, template))
        await self.core.create_namespaced_pod(SERVERS_NS, pod)
        verdict: bool | None = None
        detail = ""
        end = time.monotonic() + DECIDE_SECONDS
        while time.monotonic() < end:
            p = await self.core.read_namespaced_pod(name, SERVERS_NS)
            if p.spec.node_name:
                verdict, detail = True, f"bound to {p.spec.node_name}"
                break
            cond = next((x for x in p.status.conditions or () if x.type == "PodScheduled"), None)
            if cond is not None and cond.status == "False" and cond.reason == "Unschedulable":
                verdict, detail = False, cond.message or ""
                break
            await asyncio.sleep(0.02)
        await self.core.delete_namespaced_pod(name, SERVERS_NS, grace_period_seconds=0)

        async def gone() -> bool:
            pods = (await self.core.list_namespaced_pod(SERVERS_NS)).items
            claims = (await self.res.list_namespaced_resource_claim(SERVERS_NS)).items if template else ()
            return not pods and not claims

        await self._until(gone, 30, f"pod {name} and its claim to go")
        return verdict, detail


def server_pod(name: str, profile: randcluster.Profile, pool: Any, gpus: int) -> tuple[dict, dict | None]:
    """The pod GPUSpawner makes for ``gpus`` GPUs of ``pool`` (spawn.overrides and spawn.dra), with the
    profile's CPU, memory and ephemeral-storage guarantees as KubeSpawner puts them in the requests."""
    o = build_overrides(pool, gpus, allowed_taint_keys=DEFAULT_TOLERATED_TAINT_KEYS,
                        is_gpu_resource=CapacityConfig().is_gpu_resource)
    settings = profile.settings()
    requests: dict[str, str] = {"cpu": str(settings["cpu_guarantee"]), "memory": profile.mem.replace("G", "Gi")}
    requests.update(settings.get("extra_resource_guarantees") or {})
    requests.update(o.extra_resource_guarantees)
    container: dict[str, Any] = {"name": "notebook", "image": "quay.io/jupyter/base-notebook",
                                 "resources": {"requests": requests, "limits": dict(o.extra_resource_limits)}}
    spec: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "containers": [container],
        "tolerations": o.tolerations,
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": o.node_affinity_required}}},
    }
    template = None
    if pool.dra is not None:
        template = spawn_dra.claim_template(pool, gpus, SERVERS_NS)
        spec["resourceClaims"] = [spawn_dra.pod_resource_claim(template["metadata"]["name"])]
        container["resources"]["claims"] = [spawn_dra.container_claim()]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": SERVERS_NS}, "spec": spec}, template


# how long the cache may take to catch up with the API server after a case (a loaded CI machine
# has shown several seconds); the wait ends as soon as it has
CATCH_UP_SECONDS = 180.0


async def _wait_cache(h: Harness, cache: CapacityCache) -> None:
    """Wait until the cache holds what the API server holds now (its GPU pods, bound pods without
    GPUs and ResourceClaims, counted by the cache's own record functions from a fresh list), not a
    count taken earlier: the cluster may change under a case (a controller deletes a pod). A poll
    lists again when the cache's generation moves, else after 0.1 s."""
    end = time.monotonic() + CATCH_UP_SECONDS
    while True:
        truth = await h.counts(cache.config)
        if _counts(cache) == truth:
            return
        if time.monotonic() > end:
            raise TimeoutError(f"the capacity cache holds {_counts(cache)} (GPU pods, other pods, claims), the API "
                               f"server {truth}, after {CATCH_UP_SECONDS:g} s; its informers: {cache.health()}")
        # list again once the cache's generation moves, or after a short while (an unbound pod's
        # going changes no pool, so no generation)
        generation = _generation(cache)
        settle = time.monotonic() + 0.1
        while _generation(cache) == generation and time.monotonic() < settle:
            await asyncio.sleep(0.005)


def _generation(cache: CapacityCache) -> tuple[int, int]:
    return cache._ledger.generation, cache._dra.ledger.generation


def _counts(cache: CapacityCache) -> tuple[int, int, int]:
    counted = cache._plugin.accounts
    return counted.pod_count, counted.base_pod_count, cache._dra.accounts.claim_count


async def run_cluster(h: Harness, seed: int, cases: int, index: int) -> list[Outcome]:
    """Load cluster ``seed``, run ``cases`` random questions on it through a live CapacityCache (the hub's
    own informers, ledgers and offers) and kube-scheduler, unload it."""
    rng = random.Random(seed * 7919 + 1)
    c = randcluster.cluster(seed, prefix=f"c{index}-n")
    profiles = randcluster.profiles(rng)
    await h.load(c)
    config = CapacityConfig()
    # its own client, as a hub's cache has (stopping the cache closes it)
    cache = CapacityCache(config, api_factory=lambda: k8s.CoreV1Api(k8s.ApiClient(h.conf)))
    specs = [GPUProfileSpec.from_config({"slug": p.slug, "display_name": p.slug}) for p in profiles]
    requests = {p.slug: profile_requests({}, p.settings(), None, {}) for p in profiles}
    cache.track_requests({r for per in requests.values() for r in per.values()})
    cache.start()
    out: list[Outcome] = []
    try:
        await Harness._until(lambda: _synced(cache), 30, "the capacity cache's first sync")
        for i in range(cases):
            await _wait_cache(h, cache)
            snapshot = cache.snapshot()
            offers = build_offers(specs, snapshot, multiple_shares=True, requests=requests)
            profile = rng.choice(profiles)
            # a pool with no node to pin a pod to is never spawned on (nothing to ask the scheduler)
            pools = [p for p in offers[profile.slug].pools if p.pool.pinnable]
            if not pools:
                break
            # half the cases on a pool the model says has room, so both answers are tried often
            roomy = [p for p in pools if p.now > 0]
            offer = rng.choice(roomy if roomy and rng.random() < 0.5 else pools)
            # around the model's answer, where a wrong count shows
            gpus = max(1, rng.choice((1, 1, 2, offer.now, offer.now, offer.now + 1, rng.randint(1, 8))))
            model = offer.reason is None and offer.now >= gpus
            pod, template = server_pod(f"s{index}-{i}", profile, offer.pool, gpus)
            verdict, detail = await h.decide(pod, template)
            name = (f"cluster {seed} case {i}: {gpus} x {offer.pool.id} for {profile.slug} "
                    f"({profile.cpu} CPU, {profile.mem}{', ' + profile.ephemeral if profile.ephemeral else ''})")
            out.append(Outcome(name, model, verdict,
                               f"model: now={offer.now} reason={offer.reason!r}; scheduler: {detail}"))
    finally:
        await cache.stop()
        await h.unload()
    return out


async def _synced(cache: CapacityCache) -> bool:
    return cache.synced and cache._dra.synced


async def run(kubeconfig: str, total: int, seed: int, per_cluster: int = 40,
              progress: Any = None) -> tuple[list[Outcome], float]:
    started = time.monotonic()
    out: list[Outcome] = []
    async with Harness(kubeconfig) as h:
        await h.unload()  # what an interrupted run left
        renew = asyncio.ensure_future(h.renew_leases())
        try:
            index = 0
            while len(out) < total:
                got = await run_cluster(h, seed + index, min(per_cluster, total - len(out)), index)
                out.extend(got)
                index += 1
                if progress:
                    progress(len(out), sum(o.agrees for o in out))
        finally:
            renew.cancel()
    return out, time.monotonic() - started


def report(outcomes: list[Outcome], seconds: float) -> tuple[float, str]:
    agree = sum(o.agrees for o in outcomes)
    share = agree / len(outcomes) if outcomes else 0.0
    lines = [f"{agree} of {len(outcomes)} cases agree ({share:.2%}) in {seconds:.0f} s"]
    fits = sum(o.scheduler is True for o in outcomes)
    lines.append(f"scheduler bound {fits}, refused {sum(o.scheduler is False for o in outcomes)}, "
                 f"undecided {sum(o.scheduler is None for o in outcomes)}")
    for o in outcomes:
        if not o.agrees:
            lines.append(f"DISAGREE {o.case}: model says {'fits' if o.model else 'does not fit'}, "
                         f"scheduler {'bound it' if o.scheduler else 'refused it' if o.scheduler is False else 'did not decide'}"
                         f" ({o.detail})")
    return share, "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--per-cluster", type=int, default=40)
    ap.add_argument("--kubeconfig", help="an already running test cluster (else one is started); the run "
                    "deletes only what it created (its two namespaces' pods and claims, and the nodes, "
                    "slices and leases labelled " + randcluster.SELECTOR + ")")
    args = ap.parse_args(argv)

    def progress(n: int, agree: int) -> None:
        print(f"  {n} cases, {agree} agree", flush=True)

    if args.kubeconfig:
        outcomes, seconds = asyncio.run(run(args.kubeconfig, args.cases, args.seed, args.per_cluster, progress))
    else:
        from testcluster import ControlPlane

        with tempfile.TemporaryDirectory() as d, ControlPlane(d) as cp:
            outcomes, seconds = asyncio.run(run(str(cp.kubeconfig), args.cases, args.seed, args.per_cluster, progress))
    share, text = report(outcomes, seconds)
    print(text)
    return 0 if share >= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
