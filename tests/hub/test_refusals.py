"""Refused requests (gpuspawner.hub.refusals): one INFO line, the options forgotten, counted; options checked before they are saved."""

from __future__ import annotations

import logging

import kubespawner.spawner
import pytest
from jupyterhub.spawner import SpawnException
from tornado import web

from gpuspawner.hub.errors import Refusal
from gpuspawner.hub.gpu_metrics import REFUSAL_REASONS
from gpuspawner.hub.settings import GPUSpawnerSettings

from tests.builders import FakeCache
from tests.hub.test_pod_wait import POOL_A100, cluster, registry, spawn_sample, starting_spawner  # noqa: F401 (fixtures)
from tests.hub.test_spawner import A100, cache, make_spawner  # noqa: F401 (fixtures)


class _Orm:
    """The ``orm.Spawner`` row: where JupyterHub stored the request's options before ``start``."""

    server = None
    name = ""

    def __init__(self, options):
        self.user_options = options


class _Db:
    commits = 0

    def commit(self):
        self.commits += 1


@pytest.mark.parametrize(
    "options, status, reason",
    [
        ({"profile": "gpu", "gpus": 1.0}, 400, "bad_count"),
        ({"profile": "cpu", "securityContext": {"privileged": True}}, 400, "forbidden_option"),
        ({"profile": "cpu", "note": "x" * 1_000_000}, 400, "other"),
    ],
    ids=["float-count", "unknown-key-on-a-static-profile", "a-megabyte"],
)
async def test_a_refusal_is_one_info_line_and_is_not_kept(no_kube_client, cache, caplog, options, status, reason):
    s = make_spawner()
    db = _Db()
    s.user.db = db
    s.orm_spawner = _Orm(options)
    s.user_options = options
    caplog.set_level(logging.DEBUG)
    caplog.clear()
    with pytest.raises(Refusal) as e:
        await s.load_user_options()
    assert isinstance(e.value, SpawnException) and isinstance(e.value, web.HTTPError)
    assert e.value.status_code == status and e.value.reason == reason
    mine = [r for r in caplog.records if "alice" in r.getMessage() and r.levelno >= logging.INFO]
    assert len(mine) == 1 and mine[0].levelno == logging.INFO and mine[0].exc_info is None
    assert mine[0].getMessage().startswith(f"Refused spawn of alice ({reason}): ")
    assert len(mine[0].getMessage()) < 400  # a megabyte of options is not echoed into the log
    # JupyterHub stored the request's options as the next spawn's defaults: forgotten
    assert s.orm_spawner.user_options == {} and db.commits == 1


async def test_capacity_unknown_is_a_handled_refusal_with_503(no_kube_client, monkeypatch):
    """A 503 that JupyterHub counts as a rejection, not an error: an API outage cannot reach
    ``consecutive_failure_limit`` and stop the hub."""
    unknown = FakeCache(A100, synced=True, error="the hub cannot read the cluster's nodes and pods: cannot "
                                                  "connect to the Kubernetes API server (connection refused)")
    monkeypatch.setattr(GPUSpawnerSettings, "shared_capacity_cache", lambda self: unknown)
    s = make_spawner()
    s.user_options = {"profile": "gpu"}
    with pytest.raises(Refusal) as e:
        await s.load_user_options()
    assert e.value.status_code == 503 and isinstance(e.value, SpawnException)
    assert e.value.jupyterhub_message.startswith(
        "GPU capacity is unknown: the hub cannot read the cluster's nodes and pods: cannot connect to the "
        "Kubernetes API server (connection refused)")
    assert "Error" not in e.value.jupyterhub_message  # no exception names


async def test_the_stop_after_a_refusal_makes_no_kubernetes_call(no_kube_client, cache, monkeypatch):
    deletes = []

    async def delete(self, now=False):
        deletes.append(self.pod_name)

    monkeypatch.setattr(kubespawner.spawner.KubeSpawner, "stop", delete)
    s = make_spawner()
    s.user_options = {"profile": "gpu", "gpus": "\t1"}
    with pytest.raises(Refusal):
        await s.start()
    await s.stop()  # what JupyterHub calls after a failed start
    assert deletes == []
    await s.stop()  # a later stop is a real one again
    assert deletes == [s.pod_name]


class _Request:
    def __init__(self, query):
        self.query_arguments = {k: [v.encode() for v in vs] for k, vs in query.items()}


class _Handler:
    def __init__(self, query):
        self.request = _Request(query)


@pytest.mark.parametrize(
    "query, expected",
    [
        ({"profile": ["gpu"], "gpu_pool": [A100.id], "gpus": ["2"]},
         {"profile": "gpu", "gpu_pool": A100.id, "gpus": "2"}),
        ({"profile": ["gpu"], "profile-option-gpu--gpus": ["3"]}, {"profile": "gpu", "gpus": "3"}),
    ],
)
async def test_query_options_accept_rest_and_form_names(no_kube_client, cache, query, expected):
    s = make_spawner()
    s.handler = _Handler(query)
    assert await s.options_from_query(query) == expected


async def test_a_mixed_query_is_refused_naming_what_jupyterhub_dropped(no_kube_client, cache, caplog):
    s = make_spawner()
    s.handler = _Handler({"opt-profile": ["gpu"], "gpus": ["3"], "gpu_pool": [A100.id]})
    caplog.set_level(logging.INFO)
    with pytest.raises(Refusal) as e:
        await s.options_from_query({"profile": ["gpu"]})  # what JupyterHub hands over from that query
    assert e.value.status_code == 400
    assert e.value.jupyterhub_message.startswith(
        "the query mixes `opt-` names with plain ones (`gpu_pool`, `gpus`), and JupyterHub reads only the `opt-` ones")
    assert not s._spawn.refused  # nothing was started: a later stop is a real one


async def test_query_options_with_a_steering_name_are_refused_before_they_are_saved(no_kube_client, cache):
    s = make_spawner()
    query = {"profile": ["gpu"], "gpu_pool": [A100.id], "gpus": ["3"], "node_selector": ["x"]}
    s.handler = _Handler(query)
    with pytest.raises(Refusal) as e:
        await s.options_from_query(query)
    assert e.value.status_code == 400 and "may not set `node_selector`" in e.value.jupyterhub_message
    assert not s._spawn.refused  # nothing was started: a later stop is a real one


# --- options checked before JupyterHub saves them (hub.guard calls check_options_to_save) --------------------

@pytest.mark.parametrize(
    "options, refused",
    [
        ({"profile": "gpu", "node_selector": {"a": "b"}}, "may not set `node_selector`"),
        ({"profile": "gpu", "gpus": "two"}, "`gpus` must be a whole number"),
        ({"profile": "nope"}, "unknown profile 'nope'"),
        ({"profile": "cpu", "colour": "x"}, "unknown option(s) `colour`"),
        # what the capacity of the moment decides is left to the start
        ({"profile": "gpu", "gpu_pool": A100.id, "gpus": 1000}, None),
        ({"profile": "gpu", "gpu_pool": "not-yet:a:nvidia.com/gpu"}, None),
        ({"profile": "gpu", "gpu_pool": A100.id, "gpus": 2}, None),
    ],
    ids=["steering", "bad-count", "unknown-profile", "unknown-name", "more-than-free", "unknown-pool", "fine"],
)
async def test_options_are_checked_before_they_are_saved_by_the_rules_no_capacity_changes(
        no_kube_client, cache, caplog, options, refused):
    s = make_spawner()
    caplog.set_level(logging.INFO)
    caplog.clear()
    if refused is None:
        await s.check_options_to_save(options, spawn=False)
        return
    with pytest.raises(Refusal) as e:
        await s.check_options_to_save(options, spawn=False)
    assert e.value.status_code == 400 and refused in e.value.jupyterhub_message
    assert not s._spawn.refused  # nothing was started
    assert [r.getMessage()[:22] for r in caplog.records if "alice" in r.getMessage()] == ["Refused options of ali"]


REFUSALS = [
    ({"profile": "gpu", "gpu_pool": "made:up:nvidia.com/gpu"}, "unknown_pool", ""),
    ({"profile": "gpu", "gpu_pool": POOL_A100.id, "gpus": "two"}, "bad_count", POOL_A100.id),
    ({"profile": "gpu", "gpu_pool": POOL_A100.id, "gpus": 0}, "bad_count", POOL_A100.id),
    ({"profile": "gpu", "gpu_pool": POOL_A100.id, "gpus": 5}, "too_many_gpus", POOL_A100.id),
    ({"profile": "gpu", "gpu_pool": POOL_A100.id, "node_selector": {"a": "b"}}, "forbidden_option", POOL_A100.id),
    ({"profile": "gpu", "gpu_pool": POOL_A100.id, "colour": "red"}, "forbidden_option", POOL_A100.id),
    ({"profile": "cpu", "gpus": 1}, "forbidden_option", ""),
    ({"profile": "gpu", "gpu_pool": 7}, "unknown_pool", ""),
]


@pytest.mark.parametrize("options, reason, pool", REFUSALS,
                         ids=["unknown-pool", "not-a-number", "zero", "too-many", "trait", "unknown-option",
                              "gpus-on-cpu-profile", "pool-not-a-string"])
async def test_refusals_are_counted_with_their_reason(cluster, registry, options, reason, pool):
    s = starting_spawner()
    s.user_options = options
    with pytest.raises(web.HTTPError) as e:
        await s.load_user_options()
    assert e.value.status_code == 400
    assert e.value.jupyterhub_message == e.value.log_message  # the progress stream's words
    assert reason in REFUSAL_REASONS
    assert spawn_sample(registry, pool, "refused", reason) == 1


async def test_capacity_unknown_is_counted_and_cpu_refusals_are_not(cluster, registry):
    cluster.cache.synced = cluster.cache.healthy = False
    cluster.cache.pools.clear()
    s = starting_spawner()
    s.user_options = {"profile": "gpu"}
    with pytest.raises(web.HTTPError) as e:
        await s.load_user_options()
    assert e.value.status_code == 503
    assert spawn_sample(registry, "", "refused", "capacity_unknown") == 1
    s.user_options = {"profile": "cpu", "image": "evil"}
    with pytest.raises(web.HTTPError):
        await s.load_user_options()
    assert spawn_sample(registry, "", "refused", "forbidden_option") is None
