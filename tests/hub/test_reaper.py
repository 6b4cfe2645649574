"""The orphaned-pod reaper: a sweep deletes the pods no server owns (read after the list), counts
and logs each; a failing sweep is logged once and retried; its settings are validated."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime

import pytest
from traitlets import TraitError

from gpuspawner.hub.reaper import OrphanPodSettings, Reaper

from tests.builders import server_pod

NOW = datetime.fromisoformat("2026-11-22T01:10:00+00:00").timestamp()


def make(pods, owned, *, fail=None):
    deleted, counted = [], []

    async def list_pods():
        if fail:
            raise fail
        return pods

    async def delete_pod(orphan):
        deleted.append(orphan.name)
        return orphan.name != "jupyter-gone"  # already gone: not counted

    reaper = Reaper(list_pods=list_pods, delete_pod=delete_pod, owned=lambda: owned(), interval=0.01, grace=60,
                    counter=lambda: counted.append(1), clock=lambda: NOW)
    return reaper, deleted, counted


async def test_a_sweep_deletes_counts_and_logs_what_no_server_owns(caplog):
    pods = [server_pod("jupyter-alice", user="alice"), server_pod("jupyter-bob", "a100", user="bob"),
            server_pod("jupyter-gone", user="gone")]
    reaper, deleted, counted = make(pods, lambda: {("alice", "")})
    with caplog.at_level(logging.WARNING, logger="gpuspawner.hub.reaper"):
        done = await reaper.sweep()
    assert deleted == ["jupyter-bob", "jupyter-gone"]
    assert [o.name for o in done] == ["jupyter-bob"] and len(counted) == 1 and reaper.deleted == 1
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith("Deleted pod jhub/jupyter-bob of bob's server '': no server of the hub owns it")


async def test_owners_are_read_after_the_list():
    """A server recorded while the pods were listed owns its pod."""
    owners = set()

    async def list_pods():
        owners.add(("bob", ""))  # the hub records bob's spawn meanwhile
        return [server_pod("jupyter-bob", user="bob")]

    deleted = []

    async def delete_pod(orphan):
        deleted.append(orphan.name)
        return True

    reaper = Reaper(list_pods=list_pods, delete_pod=delete_pod, owned=lambda: set(owners), interval=1, grace=0,
                    clock=lambda: NOW)
    assert await reaper.sweep() == [] and deleted == []


async def test_a_failing_sweep_is_logged_once_and_retried(caplog):
    reaper, deleted, _ = make([], set, fail=RuntimeError("listing server pods answered HTTP 403"))
    with caplog.at_level(logging.INFO, logger="gpuspawner.hub.reaper"):
        task = asyncio.create_task(reaper.run())
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "HTTP 403" in lines[0] and "retried every 0.01 s" in lines[0]


@pytest.mark.parametrize("name, value", [
    ("gpu_orphan_pod_interval", -1.0), ("gpu_orphan_pod_interval", float("inf")),
    ("gpu_orphan_pod_grace", -5.0), ("gpu_orphan_pod_grace", float("nan")),
], ids=["negative-interval", "infinite-interval", "negative-grace", "nan-grace"])
def test_settings_are_checked(name, value):
    with pytest.raises(TraitError, match=f"{name} must be a number of seconds >= 0"):
        OrphanPodSettings(**{name: value})


def test_settings_defaults():
    s = OrphanPodSettings()
    assert (s.gpu_orphan_pod_interval, s.gpu_orphan_pod_grace) == (60.0, 120.0)


def test_the_hub_database_says_which_servers_exist():
    """Servers with a record (running, starting, stopping) own their pods; a spawner without one does not."""
    from jupyterhub import orm

    from gpuspawner.hub.reaper import hub_owned

    db = orm.new_session_factory("sqlite:///:memory:")()
    alice, bob = orm.User(name="alice"), orm.User(name="bob")
    db.add_all([alice, bob])
    db.commit()
    db.add_all([orm.Spawner(user=alice, name="", server=orm.Server()),
                orm.Spawner(user=alice, name="big", server=orm.Server()),
                orm.Spawner(user=bob, name="")])  # bob's server was stopped: no record
    db.commit()
    assert hub_owned(db) == {("alice", ""), ("alice", "big")}
