"""Which GPU nodes hold which images: reference spelling, node.status.images, counts kept per pool as nodes change."""

from __future__ import annotations

import random

import pytest

from gpuspawner.capacity.cache import CapacityCache
from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.capacity.dra_source import NOT_SERVED
from gpuspawner.capacity.nodeimages import NodeImages, node_images, normalize_image
from tests.builders import gpu_node
from tests.builders.dra import device_class, gpu_device, group_node, mig_device, resource_slice

DIGEST = "sha256:" + "a" * 64


@pytest.mark.parametrize(
    "ref, normal",
    [
        ("python", "docker.io/library/python:latest"),
        ("python:3.11", "docker.io/library/python:3.11"),
        ("docker.io/library/python:3.11", "docker.io/library/python:3.11"),
        ("index.docker.io/library/python:3.11", "docker.io/library/python:3.11"),
        ("docker.io/python:3.11", "docker.io/library/python:3.11"),
        ("jupyter/base:2026", "docker.io/jupyter/base:2026"),
        ("nvcr.io/nvidia/pytorch:24.05-py3", "nvcr.io/nvidia/pytorch:24.05-py3"),
        ("registry:5000/team/img", "registry:5000/team/img:latest"),
        ("localhost/img:1", "localhost/img:1"),
        (f"pt:cu124@{DIGEST}", f"docker.io/library/pt@{DIGEST}"),
        (f"nvcr.io/nvidia/pytorch@{DIGEST}", f"nvcr.io/nvidia/pytorch@{DIGEST}"),
        (f"registry:5000/img:1@{DIGEST}", f"registry:5000/img@{DIGEST}"),
        ("", None),
        ("two words", None),
        ("img@", None),
        (None, None),
    ],
    ids=["bare", "tag", "qualified", "legacy-index", "docker-io-one-part", "hub-user", "other-registry",
         "registry-port-no-tag", "localhost", "tag-and-digest", "digest", "port-tag-digest", "empty",
         "space", "empty-digest", "not-text"],
)
def test_an_image_reference_has_one_spelling_as_the_kubelet_reports_it(ref, normal):
    assert normalize_image(ref) == normal


def test_node_images_reads_every_name_with_its_size_and_skips_odd_entries():
    status = {"images": [
        {"names": ["docker.io/library/pt@" + DIGEST, "docker.io/library/pt:cu124"], "sizeBytes": 15_000_000_000},
        {"names": "not-a-list", "sizeBytes": 1},
        {"names": [{"not": "a name"}, ["nor", "this"], 7], "sizeBytes": 1},
        "not-an-entry",
        {"names": ["registry.k8s.io/pause:3.10"], "sizeBytes": "big"},
    ]}
    assert node_images(status) == {
        "docker.io/library/pt@" + DIGEST: 15_000_000_000,
        "docker.io/library/pt:cu124": 15_000_000_000,
        "registry.k8s.io/pause:3.10": 0,
    }
    assert node_images({"images": "nope"}) == {} and node_images(None) == {}


def test_counts_follow_nodes_joining_pulling_and_leaving():
    counts = NodeImages()
    counts.update("n1", ["a100"], {"docker.io/library/pt:cu124": 15})
    counts.update("n2", ["a100"], {})
    assert (counts.cached("a100", "pt:cu124"), counts.nodes("a100")) == (1, 2)
    counts.update("n2", ["a100"], {"docker.io/library/pt:cu124": 15})  # the pull finished
    assert counts.cached("a100", "docker.io/library/pt:cu124") == 2
    assert counts.warm_nodes("a100", "pt:cu124") == {"n1", "n2"}
    counts.update("n1", [], {"docker.io/library/pt:cu124": 15})  # NotReady: no longer in the pool's count
    assert (counts.cached("a100", "pt:cu124"), counts.nodes("a100")) == (1, 1)
    assert counts.size("pt:cu124") == 15  # still known from the node that holds it
    counts.remove("n2")
    counts.retain({"n2"})
    assert (counts.cached("a100", "pt:cu124"), counts.nodes("a100"), counts.size("pt:cu124")) == (0, 0, None)


def test_incremental_counts_equal_a_recount_after_any_sequence_of_node_changes():
    rng = random.Random(7)
    refs = [f"docker.io/library/img{i}:1" for i in range(5)]
    counts = NodeImages()
    state: dict[str, tuple[list[str], dict[str, int]]] = {}
    for _ in range(400):
        node = f"n{rng.randrange(12)}"
        if rng.random() < 0.2:
            counts.remove(node)
            state.pop(node, None)
            continue
        pools = rng.sample(["a", "b", "c"], rng.randrange(3))
        images = {r: rng.randrange(1, 9) for r in rng.sample(refs, rng.randrange(6))}
        counts.update(node, pools, images)
        state[node] = (pools, images)
    for pool in "abc":
        assert counts.nodes(pool) == sum(pool in p for p, _ in state.values())
        for ref in refs:
            assert counts.cached(pool, ref) == sum(pool in p and ref in i for p, i in state.values()), (pool, ref)
    for ref in refs:
        sizes = [i[ref] for _, i in state.values() if ref in i]
        assert counts.size(ref) == (max(sizes) if sizes else None)


def _cache() -> CapacityCache:
    return CapacityCache(CapacityConfig(node_group_labels=("cloud.google.com/gke-nodepool",)),
                         api_factory=lambda: None)


def _with_images(node: dict, *names: str, size: int = 10) -> dict:
    node["status"]["images"] = [{"names": list(names), "sizeBytes": size}]
    return node


async def test_the_cache_counts_a_pools_images_from_node_events():
    cache = _cache()
    nodes = cache._informers["nodes"]
    labels = {"cloud.google.com/gke-nodepool": "a100", "nvidia.com/gpu.product": "A100"}
    nodes._apply(_with_images(gpu_node("g1", labels=labels), "docker.io/library/pt:cu124"))
    nodes._apply(_with_images(gpu_node("g2", labels=labels), "docker.io/library/other:1"))
    nodes._apply(_with_images({"metadata": {"name": "cpu-1"}, "status": {}}, "docker.io/library/pt:cu124"))
    pid = cache._ledger.pools()[0].id
    assert (cache.node_images.cached(pid, "pt:cu124"), cache.node_images.nodes(pid)) == (1, 2)
    assert cache._ledger.pools()[0].nodes == cache.node_images.nodes(pid)
    nodes._remove({"metadata": {"name": "g1"}})
    assert (cache.node_images.cached(pid, "pt:cu124"), cache.node_images.nodes(pid)) == (0, 1)
    await nodes._retain(set())
    assert cache.node_images.node_count == 0


def test_a_dra_pool_counts_the_nodes_the_dra_ledger_says_contribute():
    counts = NodeImages()
    counts.update_other("d1", {"docker.io/library/pt:cu124": 15})  # kept, counted in no pool yet
    counts.update_other("d2", {})
    assert (counts.nodes("dra"), counts.cached("dra", "pt:cu124"), counts.size("pt:cu124")) == (0, 0, None)
    counts.dra_member("dra", "d1", True)
    counts.dra_member("dra", "d2", True)
    assert (counts.nodes("dra"), counts.cached("dra", "pt:cu124"), counts.size("pt:cu124")) == (2, 1, 15)
    assert counts.warm_nodes("dra", "pt:cu124") == {"d1"}
    counts.update_other("d2", {"docker.io/library/pt:cu124": 15})  # the pull finished
    assert counts.cached("dra", "pt:cu124") == 2
    counts.dra_member("dra", "d1", False)  # its slice went, or it went NotReady
    assert (counts.nodes("dra"), counts.cached("dra", "pt:cu124")) == (1, 1)
    counts.dra_member("dra", "d2", False)
    counts.update_other("d1", {})  # DRA known absent: a non-GPU node's images are not kept
    counts.update_other("d2", {})
    assert (counts.nodes("dra"), counts.size("pt:cu124"), counts.node_count) == (0, None, 0)


def test_incremental_counts_equal_a_recount_after_any_sequence_of_node_and_dra_changes():
    rng = random.Random(11)
    refs = [f"docker.io/library/img{i}:1" for i in range(5)]
    counts = NodeImages()
    images: dict[str, dict[str, int]] = {}
    plugin: dict[str, list[str]] = {}
    dra: dict[str, set[str]] = {}
    for _ in range(600):
        node = f"n{rng.randrange(12)}"
        step = rng.random()
        held = {r: rng.randrange(1, 9) for r in rng.sample(refs, rng.randrange(6))}
        if step < 0.15:
            counts.remove(node)
            images.pop(node, None)
            plugin.pop(node, None)
        elif step < 0.4:
            pools = rng.sample(["a", "b"], rng.randrange(3))
            counts.update(node, pools, held)
            images[node], plugin[node] = held, pools
        elif step < 0.6:
            counts.update_other(node, held)
            images[node] = held
            plugin.pop(node, None)
        else:
            pool, joined = rng.choice(["x", "y"]), rng.random() < 0.6
            counts.dra_member(pool, node, joined)
            (dra.setdefault(node, set()).add if joined else dra.setdefault(node, set()).discard)(pool)
    members = {n: set(plugin.get(n, ())) | dra.get(n, set()) for n in set(plugin) | {n for n in dra if dra[n]}}
    for pool in "abxy":
        assert counts.nodes(pool) == sum(pool in p for p in members.values())
        for ref in refs:
            assert counts.cached(pool, ref) == sum(pool in p and ref in images.get(n, {})
                                                   for n, p in members.items()), (pool, ref)
    for ref in refs:  # sizes come from GPU nodes (device plugin, or in a DRA pool), never from others
        sizes = [images[n][ref] for n in members if ref in images.get(n, {})]
        assert counts.size(ref) == (max(sizes) if sizes else None)


def _dra_cache() -> CapacityCache:
    cache = _cache()
    for c in (device_class("gpu.nvidia.com", device_type="gpu"), device_class("mig.nvidia.com", device_type="mig")):
        cache._dra.apply("deviceclasses", c)
    return cache


def _dra_node(name: str, *images: str, ready: bool = True) -> dict:
    obj = group_node(name, "dra-a100", ready=ready)
    obj["status"]["images"] = [{"names": [ref], "sizeBytes": 10} for ref in images]
    return obj


def test_the_cache_counts_a_dra_pools_images_on_the_nodes_its_slices_name():
    cache = _dra_cache()
    nodes, slices = cache._informers["nodes"], "resourceslices"
    # a node seen before its slice keeps its images; a slice before its node counts it once the node comes
    nodes._apply(_dra_node("d1", "docker.io/library/pt:cu124"))
    cache._dra.apply(slices, resource_slice("d1-gpus", "d1", [gpu_device("gpu-0")]))
    cache._dra.apply(slices, resource_slice("d2-gpus", "d2", [gpu_device("gpu-0")]))
    nodes._apply(_dra_node("d2"))
    nodes._apply(_dra_node("cpu-1", "docker.io/library/pt:cu124"))  # no slice: in no pool
    (pool,) = cache._dra.ledger.pools()
    counts = cache.node_images
    assert (counts.cached(pool.id, "pt:cu124"), counts.nodes(pool.id), pool.nodes) == (1, 2, 2)
    assert counts.warm_nodes(pool.id, "pt:cu124") == {"d1"}
    nodes._apply(_dra_node("d2", "docker.io/library/pt:cu124"))  # the pull finished
    assert counts.cached(pool.id, "pt:cu124") == 2
    nodes._apply(_dra_node("d1", "docker.io/library/pt:cu124", ready=False))  # leaves the pool's count
    assert (counts.cached(pool.id, "pt:cu124"), counts.nodes(pool.id)) == (1, 1)
    cache._dra.remove(slices, {"metadata": {"name": "d2-gpus"}})
    assert (counts.cached(pool.id, "pt:cu124"), counts.nodes(pool.id)) == (0, 0)
    # once the cluster is known not to serve DRA (no slices), a node's next status report drops its images
    cache._dra.remove(slices, {"metadata": {"name": "d1-gpus"}})
    cache._dra.api_state = NOT_SERVED
    for name in ("d1", "d2", "cpu-1"):
        nodes._apply(_dra_node(name, "docker.io/library/pt:cu124"))
    assert counts.node_count == 0


def test_dra_counts_equal_the_dra_pools_nodes_after_any_sequence_of_events():
    rng = random.Random(5)
    cache = _dra_cache()
    nodes = cache._informers["nodes"]
    refs = [f"docker.io/library/img{i}:1" for i in range(3)]
    held: dict[str, set[str]] = {}
    warm_seen = 0
    for _ in range(300):
        name = f"d{rng.randrange(6)}"
        step = rng.random()
        if step < 0.35:
            held[name] = set(rng.sample(refs, rng.randrange(4)))
            nodes._apply(_dra_node(name, *held[name], ready=rng.random() < 0.8))
        elif step < 0.45:
            nodes._remove({"metadata": {"name": name}})
            held.pop(name, None)
        elif step < 0.75:
            product = rng.choice(["NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"])
            cache._dra.apply("resourceslices", resource_slice(f"{name}-s", name, [
                gpu_device(f"gpu-{i}", product) for i in range(rng.randrange(1, 3))]))
        elif step < 0.9:
            cache._dra.remove("resourceslices", {"metadata": {"name": f"{name}-s"}})
        else:
            cache._dra.apply("resourceslices", resource_slice(f"{name}-m", name, [mig_device("gpu-0-mig-0")]))
        for pool in cache._dra.ledger.pools():
            members = {v.name for v in pool.node_views}
            assert cache.node_images.nodes(pool.id) == pool.nodes == len(members)
            for ref in refs:
                warm = cache.node_images.warm_nodes(pool.id, ref)
                assert warm == {n for n in members if ref in held.get(n, ())}
                warm_seen += len(warm)
    assert warm_seen > 100  # the sequence put warm nodes in the pools, not only cold ones
