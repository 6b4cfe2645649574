"""The ledger's tables in the hub's database, on SQLite and PostgreSQL: schema, writes, reads."""

import pytest
from sqlalchemy import select, update

from gpuspawner.usage import store
from gpuspawner.usage.store import SchemaError, UsageStore
from tests.builders.usage import NOW, at, holding, session


@pytest.fixture
def ledger(db_url):
    db = session(db_url)
    store._ready.clear()
    yield UsageStore(db).ready()
    db.close()
    db.get_bind().dispose()


def test_schema_is_created_and_versioned(ledger):
    version = ledger.db.execute(select(store.schema_versions.c.version)).scalar()
    assert version == store.SCHEMA_VERSION


def test_a_newer_schema_is_refused_with_what_to_do(db_url):
    db = session(db_url)
    store._ready.clear()
    UsageStore(db).ready()
    db.execute(update(store.schema_versions).values(version=store.SCHEMA_VERSION + 1))
    db.commit()
    store._ready.clear()
    with pytest.raises(SchemaError, match="upgrade gpuspawner"):
        UsageStore(db).ready()
    db.close()


def test_open_and_close_once(ledger):
    hid = ledger.open(holding("2026-11-27 10:00"), namespace="jhub", pod_name="jupyter-alice", pod_uid="u1")
    assert ledger.open(holding("2026-11-27 10:05"), namespace="jhub", pod_name="jupyter-alice", pod_uid="u1") == hid
    assert ledger.close(hid, at("2026-11-27 11:00"), "stopped") is True
    assert ledger.close(hid, at("2026-11-27 11:30"), "stopped") is False  # never counted twice
    [h] = ledger.for_user("alice", None)
    assert (h.start, h.stop) == (at("2026-11-27 10:00"), at("2026-11-27 11:00"))


def test_a_stop_before_the_start_is_the_start(ledger):
    hid = ledger.open(holding("2026-11-27 10:00"))
    ledger.close(hid, at("2026-11-27 09:00"), "pod-gone")
    [h] = ledger.for_user("alice", None)
    assert h.stop == h.start


def test_reads_by_window_user_and_server(ledger):
    ledger.open(holding("2026-09-01 10:00", "2026-09-01 11:00"))
    old = ledger.open(holding("2026-09-01 10:00"))
    ledger.close(old, at("2026-09-01 12:00"), "stopped")
    ledger.open(holding("2026-11-27 10:00", server="big"), pod_uid="u2")
    ledger.open(holding("2026-11-27 10:00", user="bob"), pod_uid="u3")
    assert [h.server for h in ledger.for_user("alice", at("2026-11-01 00:00"))] == ["big"]
    assert len(ledger.for_user("alice", None)) == 3
    assert [(h.user, h.server) for h in ledger.for_users(["alice", "bob"], at("2026-11-01 00:00"))] == \
        [("alice", "big"), ("bob", "")]
    assert [r[3] for r in ledger.open_for_server("alice", "big")] == ["u2"]
    assert ledger.count_open() == 2
    assert ledger.for_users([], None) == []


def test_times_come_back_as_utc(ledger):
    ledger.open(holding(NOW))
    [h] = ledger.for_user("alice", None)
    assert h.start == NOW and h.start.tzinfo is not None
