"""The capacity cache as a spawner reaches it (gpuspawner.hub.capacity_access): the cache or None, each problem logged once."""

from __future__ import annotations

import logging

import pytest

from gpuspawner.hub import capacity_access
from gpuspawner.hub.settings import GPUSpawnerSettings
from tests.hub.test_spawner import make_spawner


@pytest.fixture(autouse=True)
def nothing_logged_yet(monkeypatch):
    monkeypatch.setattr(capacity_access, "_logged", set())


def test_a_cache_that_cannot_start_is_none_and_said_once(no_kube_client, monkeypatch, caplog):
    def broken(self):
        raise RuntimeError("no kubeconfig at /nowhere")

    monkeypatch.setattr(GPUSpawnerSettings, "shared_capacity_cache", broken)
    s = make_spawner()
    with caplog.at_level(logging.WARNING):
        assert s.capacity_cache() is None
        assert s.capacity_cache() is None
    said = [r.getMessage() for r in caplog.records if "could not start" in r.getMessage()]
    assert len(said) == 1
    assert "no kubeconfig at /nowhere" in said[0] and "refuse GPU spawns" in said[0]


@pytest.mark.parametrize(
    "problems, lines",
    [
        (["capacity figures are 31 s old", "capacity figures are 32 s old"], 1),
        (["capacity figures are 31 s old", "the capacity cache lost its watch"], 2),
        (["forbidden: nodes", "forbidden: nodes"], 1),
    ],
    ids=["numbers-do-not-make-it-new", "two-problems", "same-words"],
)
def test_a_problem_is_logged_once_whatever_its_numbers(no_kube_client, caplog, problems, lines):
    s = make_spawner()
    with caplog.at_level(logging.WARNING):
        for problem in problems:
            capacity_access.log_problem(s, problem)
    assert len([r for r in caplog.records if "Static profiles are still offered" in r.getMessage()]) == lines
