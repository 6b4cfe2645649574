"""The ledger's tables in the hub's database, on SQLite and PostgreSQL: schema, writes, reads."""

import pytest
from sqlalchemy import event, select, update

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


class _Reads:
    """Counts the SELECTs of the holdings table that reach the database."""

    def __init__(self, db):
        self.n = 0
        event.listen(db.get_bind(), "before_cursor_execute", self._seen)

    def _seen(self, conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith("SELECT") and store.holdings.name in statement:
            self.n += 1


def test_a_pages_second_read_of_an_unchanged_ledger_asks_the_database_nothing(ledger):
    ledger.open(holding("2026-11-27 10:00", "2026-11-27 11:00"))
    reads = _Reads(ledger.db)
    first = ledger.recent_for_user("alice", at("2026-11-01 00:00"))
    assert reads.n == 1
    # the next view, a little later: its window starts later, within what was read
    assert ledger.recent_for_user("alice", at("2026-11-01 00:05")) == first
    assert reads.n == 1
    # a window reaching further back than the read did is read anew
    ledger.recent_for_user("alice", at("2026-10-01 00:00"))
    assert reads.n == 2


def test_a_write_through_any_store_of_the_hub_is_seen_by_the_next_page_read(ledger):
    ledger.recent_for_user("alice", None)
    other = UsageStore(ledger.db)  # another request's store on the hub's database
    hid = other.open(holding("2026-11-27 10:00"))
    [h] = ledger.recent_for_user("alice", None)
    assert h.stop is None
    other.close(hid, at("2026-11-27 12:00"), "stopped")
    [h] = ledger.recent_for_user("alice", None)
    assert h.stop == at("2026-11-27 12:00")


def test_a_change_made_outside_the_hub_is_seen_once_the_read_is_older_than_max_age(ledger):
    ledger.recent_for_user("alice", None)
    # a row written by hand (or another process), not through a UsageStore of this one
    ledger.db.execute(store.holdings.insert().values(
        user_name="alice", server_name="", pool="a100", resource="nvidia.com/gpu", gpus=1, share=1.0, weight=1.0,
        start=at("2026-11-27 10:00").replace(tzinfo=None)))
    ledger.db.commit()
    assert ledger.recent_for_user("alice", None) == []  # the page's read, still fresh
    assert len(ledger.recent_for_user("alice", None, max_age=0)) == 1


def test_a_page_read_with_a_later_window_leaves_out_what_stopped_before_it(ledger):
    ledger.open(holding("2026-11-20 10:00", "2026-11-20 11:00"))
    ledger.open(holding("2026-11-27 10:00"), pod_uid="u2")
    assert len(ledger.recent_for_user("alice", at("2026-11-01 00:00"))) == 2
    [h] = ledger.recent_for_user("alice", at("2026-11-21 00:00"))  # from the same read
    assert h.stop is None
    # and the same as the database's own answer
    assert ledger.for_user("alice", at("2026-11-21 00:00")) == [h]


def test_page_reads_keep_at_most_recent_users(ledger, monkeypatch):
    monkeypatch.setattr(store, "RECENT_USERS", 2)
    for user in ("ann", "bob", "cyd"):
        ledger.recent_for_user(user, None)
    assert [user for _engine, user in store._recent] == ["bob", "cyd"]
