"""gpuspawner's Prometheus metrics, read back from the text exposition."""

import importlib.util
import logging
import pathlib

import pytest
from prometheus_client import REGISTRY, CollectorRegistry, Counter, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import gpuspawner.hub.gpu_metrics as metrics
from gpuspawner.capacity.model import ScaleUp
from tests.builders import pool_view
from tests.builders import snapshot as build_snapshot

A100 = "a100:nvidia-a100-sxm4-80gb:nvidia.com/gpu"
T4 = "t4:tesla-t4:nvidia.com/gpu"


def pool(pid, total, free, nodes=1, product="NVIDIA-A100-SXM4-80GB"):
    """A pool as the metrics read it: its id, counts and product (no node group), able to scale up."""
    return pool_view(None, product, id=pid, nodes=nodes, total=total, free=free, scale_up=ScaleUp(4, 8, 6))


def snapshot(*pools, synced=True, healthy=True, age=2.5):
    return build_snapshot(*pools, synced=synced, healthy=healthy, age_seconds=age)


def samples(registry):
    """{(sample name, frozenset(labels)): value} of the registry's exposition."""
    text = generate_latest(registry).decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(registry, name, **labels):
    return samples(registry).get((name, frozenset(labels.items())))


def names(registry):
    return {name for name, _ in samples(registry)}


@pytest.fixture
def registry():
    return CollectorRegistry()


# ---------------------------------------------------------------------------
# capacity, read at scrape time
# ---------------------------------------------------------------------------


def test_pool_gauges_come_from_the_snapshot(registry):
    metrics.install(registry, snapshot=lambda: snapshot(pool(A100, 16, 5, nodes=2), pool(T4, 4, 4, product=None)))
    a100 = dict(pool=A100, resource="nvidia.com/gpu", product="NVIDIA-A100-SXM4-80GB")
    t4 = dict(pool=T4, resource="nvidia.com/gpu", product="unknown")
    assert value(registry, "gpuspawner_pool_gpus", **a100) == 16
    assert value(registry, "gpuspawner_pool_free_gpus", **a100) == 5
    assert value(registry, "gpuspawner_pool_nodes", **a100) == 2
    assert value(registry, "gpuspawner_pool_gpus", **t4) == 4
    assert value(registry, "gpuspawner_capacity_cache_age_seconds") == 2.5
    assert value(registry, "gpuspawner_capacity_cache_synced") == 1
    assert value(registry, "gpuspawner_capacity_cache_healthy") == 1


def test_each_scrape_reads_anew_and_a_vanished_pool_leaves_no_series(registry):
    current = [snapshot(pool(A100, 16, 5), pool(T4, 4, 4))]
    metrics.install(registry, snapshot=lambda: current[0])
    assert value(registry, "gpuspawner_pool_free_gpus", pool=T4, resource="nvidia.com/gpu",
                 product="NVIDIA-A100-SXM4-80GB") == 4
    current[0] = snapshot(pool(A100, 16, 1), synced=True, healthy=False, age=95.0)
    got = samples(registry)
    assert not [k for k in got if ("pool", T4) in k[1]]
    assert value(registry, "gpuspawner_pool_free_gpus", pool=A100, resource="nvidia.com/gpu",
                 product="NVIDIA-A100-SXM4-80GB") == 1
    assert value(registry, "gpuspawner_capacity_cache_healthy") == 0
    assert value(registry, "gpuspawner_capacity_cache_age_seconds") == 95.0


@pytest.mark.parametrize(
    "source",
    [None, lambda: None, lambda: 1 / 0, lambda: {"pools": []}],
    ids=["no-source", "cache-not-started", "source-raises", "wrong-type"],
)
def test_unknown_capacity_reads_as_not_synced_not_healthy(registry, source, caplog):
    metrics.install(registry, snapshot=source)
    with caplog.at_level(logging.WARNING, logger="gpuspawner.hub.gpu_metrics"):
        got = samples(registry)  # the scrape itself must not fail
    assert value(registry, "gpuspawner_capacity_cache_synced") == 0
    assert value(registry, "gpuspawner_capacity_cache_healthy") == 0
    assert not [k for k in got if k[0].startswith("gpuspawner_pool_")]
    assert ("gpuspawner_capacity_cache_age_seconds", frozenset()) not in got


def test_snapshot_source_must_be_callable(registry):
    m = metrics.install(registry)
    with pytest.raises(TypeError, match="callable such as CapacityCache.snapshot"):
        m.set_snapshot(snapshot())


# ---------------------------------------------------------------------------
# spawns and waiting
# ---------------------------------------------------------------------------


def test_spawn_outcomes_are_counted_by_pool_outcome_and_reason(registry):
    m = metrics.install(registry)
    m.spawn_started(A100)
    m.spawn_started(A100)
    m.spawn_refused(A100, "too_many_gpus")
    m.spawn_refused(A100, "capacity_unknown")
    m.spawn_failed(A100, "untolerated_taint")
    m.spawn_failed(T4, "timeout")
    m.spawn_failed(T4)
    name = "gpuspawner_spawns_total"
    assert value(registry, name, pool=A100, outcome="started", reason="") == 2
    assert value(registry, name, pool=A100, outcome="refused", reason="too_many_gpus") == 1
    assert value(registry, name, pool=A100, outcome="refused", reason="capacity_unknown") == 1
    assert value(registry, name, pool=A100, outcome="failed", reason="untolerated_taint") == 1
    assert value(registry, name, pool=T4, outcome="failed", reason="timeout") == 1
    assert value(registry, name, pool=T4, outcome="failed", reason="error") == 1


def test_reason_labels_stay_bounded(registry, caplog):
    m = metrics.install(registry)
    with caplog.at_level(logging.WARNING, logger="gpuspawner.hub.gpu_metrics"):
        for i in range(3):
            m.spawn_refused(A100, f"user typed {i}")
        m.spawn_failed(A100, "something new")
        # a made-up pool id never becomes a label value
        m.spawn_refused("pool-the-user-invented-123", "unknown_pool")
    name = "gpuspawner_spawns_total"
    assert value(registry, name, pool=A100, outcome="refused", reason="other") == 3
    assert value(registry, name, pool=A100, outcome="failed", reason="other") == 1
    assert value(registry, name, pool="", outcome="refused", reason="unknown_pool") == 1
    assert "pool-the-user-invented-123" not in generate_latest(registry).decode()
    assert "not a known reason for refused spawns" in caplog.text


def test_every_fatal_progress_kind_is_a_failure_reason():
    from gpuspawner.spawn.progress import FATAL_KINDS

    assert FATAL_KINDS <= metrics.FAILURE_REASONS


def test_gpu_wait_histogram_from_the_pod(registry):
    m = metrics.install(registry)
    pod = {
        "metadata": {"creationTimestamp": "2026-11-22T00:00:00Z"},
        "status": {"conditions": [{"type": "PodScheduled", "status": "True",
                                   "lastTransitionTime": "2026-11-22T00:06:30Z"}]},
    }
    assert m.observe_pod_scheduled(A100, pod) == 390.0
    m.observe_gpu_wait(A100, 3)
    pending = {"metadata": {"creationTimestamp": "2026-11-22T00:00:00Z"}, "status": {}}
    assert m.observe_pod_scheduled(A100, pending) is None
    name = "gpuspawner_gpu_wait_seconds"
    assert value(registry, f"{name}_count", pool=A100) == 2
    assert value(registry, f"{name}_sum", pool=A100) == 393.0
    assert value(registry, f"{name}_bucket", pool=A100, le="5.0") == 1
    assert value(registry, f"{name}_bucket", pool=A100, le="300.0") == 1
    assert value(registry, f"{name}_bucket", pool=A100, le="600.0") == 2


@pytest.mark.parametrize("seconds", [-1, float("nan"), float("inf"), "12", None, True],
                         ids=["negative", "nan", "inf", "string", "none", "bool"])
def test_bad_wait_values_are_ignored(registry, seconds, caplog):
    m = metrics.install(registry)
    with caplog.at_level(logging.WARNING, logger="gpuspawner.hub.gpu_metrics"):
        m.observe_gpu_wait(A100, seconds)
    assert value(registry, "gpuspawner_gpu_wait_seconds_count", pool=A100) is None


# ---------------------------------------------------------------------------
# registering more than once
# ---------------------------------------------------------------------------


def test_install_twice_returns_the_same_collector(registry):
    first = metrics.install(registry, snapshot=lambda: snapshot(pool(A100, 8, 8)))
    first.spawn_started(A100)
    second = metrics.install(registry, snapshot=lambda: snapshot(pool(A100, 8, 2)))
    assert second is first
    # the later hub's source wins; counts are kept
    assert value(registry, "gpuspawner_pool_free_gpus", pool=A100, resource="nvidia.com/gpu",
                 product="NVIDIA-A100-SXM4-80GB") == 2
    assert value(registry, "gpuspawner_spawns_total", pool=A100, outcome="started", reason="") == 1
    assert metrics.install(registry) is first  # no source given: keeps the current one
    assert value(registry, "gpuspawner_pool_gpus", pool=A100, resource="nvidia.com/gpu",
                 product="NVIDIA-A100-SXM4-80GB") == 8


def _fresh_copy_of_the_module():
    """The metrics module loaded again under another name: what importlib.reload
    or a second import path leaves behind (a different GPUMetrics class)."""
    path = pathlib.Path(metrics.__file__)
    spec = importlib.util.spec_from_file_location("gpuspawner._metrics_copy", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_reimported_module_replaces_the_old_collector(registry):
    old = metrics.install(registry)
    old.spawn_started(A100)
    copy = _fresh_copy_of_the_module()
    new = copy.install(registry, snapshot=lambda: snapshot(pool(A100, 8, 8)))
    assert new is not old
    assert copy.install(registry) is new
    text = generate_latest(registry).decode()
    assert text.count("# TYPE gpuspawner_spawns_total counter") == 1
    assert text.count("# TYPE gpuspawner_pool_gpus gauge") == 1


def test_names_taken_by_someone_else_do_not_raise(registry, caplog):
    Counter("gpuspawner_spawns", "someone else's", registry=registry)
    with caplog.at_level(logging.WARNING, logger="gpuspawner.hub.gpu_metrics"):
        m = metrics.install(registry)
    m.spawn_started(A100)  # still usable, just not exported
    assert "names are taken" in caplog.text
    assert "gpuspawner_pool_gpus" not in generate_latest(registry).decode()


def test_default_registry_is_what_the_hub_serves():
    # JupyterHub's /hub/metrics serves prometheus_client.REGISTRY (jupyterhub/handlers/metrics.py),
    # where jupyterhub.metrics registered its own collectors at import
    import jupyterhub.metrics  # noqa: F401

    try:
        m = metrics.install(snapshot=lambda: snapshot(pool(A100, 8, 3)))
        assert metrics.install() is m
        assert value(REGISTRY, "gpuspawner_pool_free_gpus", pool=A100, resource="nvidia.com/gpu",
                     product="NVIDIA-A100-SXM4-80GB") == 3
        assert "jupyterhub_running_servers" in names(REGISTRY)
    finally:
        metrics.uninstall()
    assert "gpuspawner_" not in generate_latest(REGISTRY).decode()
    metrics.uninstall()  # a second uninstall is a no-op
