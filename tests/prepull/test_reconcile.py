"""The pre-puller's loop: one pass makes the DaemonSets match the plan; errors are retried with backoff."""

from __future__ import annotations

import asyncio
import logging

import pytest

from gpuspawner.prepull.plan import SPEC_ANNOTATION, PrepullSettings, plan
from gpuspawner.prepull.reconcile import Prepuller, reconcile
from tests.builders import gpu_offers, pool_view

A100 = pool_view("a100", "NVIDIA-A100-SXM4-80GB")
T4 = pool_view("t4", "Tesla-T4")
SETTINGS = PrepullSettings(namespace="jhub")


class Namespace:
    """DaemonSets held in memory, as the API server would list them back (the reconciler's
    protocol, so the diff is tested without a cluster; the end-to-end test uses a real one)."""

    def __init__(self) -> None:
        self.objects: dict[str, dict] = {}
        self.calls: list[tuple[str, str]] = []
        self.fail: Exception | None = None

    async def list(self):
        if self.fail:
            raise self.fail
        return {n: o["metadata"]["annotations"].get(SPEC_ANNOTATION) for n, o in self.objects.items()}

    async def create(self, manifest):
        self.calls.append(("create", manifest["metadata"]["name"]))
        self.objects[manifest["metadata"]["name"]] = manifest

    async def replace(self, manifest):
        self.calls.append(("replace", manifest["metadata"]["name"]))
        self.objects[manifest["metadata"]["name"]] = manifest

    async def delete(self, name):
        self.calls.append(("delete", name))
        del self.objects[name]


def wanted(profiles, *pools):
    return plan(gpu_offers(profiles, *pools), pools, SETTINGS)[0]


IMAGE_A = [{"slug": "gpu", "kubespawner_override": {"image": "a:1"}}]
IMAGE_B = [{"slug": "gpu", "kubespawner_override": {"image": "b:1"}}]


async def test_a_pass_creates_one_daemonset_per_pool_then_nothing_more():
    ns = Namespace()
    first = await reconcile(ns, wanted(IMAGE_A, A100, T4))
    assert len(first.created) == 2 and not first.replaced and not first.deleted
    again = await reconcile(ns, wanted(IMAGE_A, A100, T4))
    assert not again and len(ns.calls) == 2


async def test_a_changed_profile_list_rerenders_and_a_gone_pool_takes_its_daemonset():
    ns = Namespace()
    await reconcile(ns, wanted(IMAGE_A, A100, T4))
    changes = await reconcile(ns, wanted(IMAGE_B, A100))
    assert len(changes.replaced) == 1 and len(changes.deleted) == 1 and not changes.created
    (only,) = ns.objects.values()
    assert [c["image"] for c in only["spec"]["template"]["spec"]["initContainers"]] == ["b:1"]


async def test_no_plan_touches_nothing():
    ns = Namespace()
    await reconcile(ns, wanted(IMAGE_A, A100))

    async def unknown():
        return None

    assert await Prepuller(ns, unknown).run_once() is None
    assert len(ns.objects) == 1


async def test_api_errors_are_logged_once_and_retried_with_growing_backoff(caplog):
    ns = Namespace()
    ns.fail = RuntimeError("503 Service Unavailable")
    sleeps: list[float] = []

    async def source():
        return wanted(IMAGE_A, A100), []

    async def sleep(seconds):
        sleeps.append(seconds)
        if len(sleeps) == 4:
            ns.fail = None
        if len(sleeps) == 6:
            raise asyncio.CancelledError

    puller = Prepuller(ns, source, interval=10, max_backoff=40, sleep=sleep, rand=lambda: 1.0)
    with caplog.at_level(logging.INFO), pytest.raises(asyncio.CancelledError):
        await puller.run()
    assert sleeps == [20, 40, 40, 40, 10, 10]
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "503 Service Unavailable" in errors[0].getMessage()
    assert any("works again" in r.getMessage() for r in caplog.records)
    assert len(ns.objects) == 1


async def test_problems_are_logged_once_while_they_last(caplog):
    ns = Namespace()
    problems = ["images are not pre-pulled on x: no labels"]

    async def source():
        return {}, problems

    puller = Prepuller(ns, source)
    with caplog.at_level(logging.WARNING):
        await puller.run_once()
        await puller.run_once()
    assert [r.getMessage() for r in caplog.records].count("gpuspawner pre-pull: " + problems[0]) == 1
