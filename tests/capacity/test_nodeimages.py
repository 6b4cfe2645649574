"""Which GPU nodes hold which images: reference spelling, node.status.images, counts kept per pool as nodes change."""

from __future__ import annotations

import random

import pytest

from gpuspawner.capacity.cache import CapacityCache
from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.capacity.nodeimages import NodeImages, node_images, normalize_image
from tests.builders import gpu_node

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


def test_the_cache_counts_a_pools_images_from_node_events():
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
    nodes._retain(set())
    assert cache.node_images.node_count == 0
