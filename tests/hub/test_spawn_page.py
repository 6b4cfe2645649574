"""The spawn page's cache (gpuspawner.hub.spawn_page): a result kept under the object it was built
from (by identity) and a key (by value), the oldest going first. Pure: no hub, no cluster."""

import pytest

from gpuspawner.hub.settings import fingerprint
from gpuspawner.hub.spawn_page import PageCache


def test_fingerprint_compares_configuration_by_value_whatever_the_key_order():
    assert fingerprint({"a": 1, "b": [1, 2]}) == fingerprint({"b": [1, 2], "a": 1})
    assert fingerprint({"a": 1}) != fingerprint({"a": 2})
    assert fingerprint([{"slug": "gpu"}], None, print) != fingerprint([{"slug": "gpu"}], None, len)  # callables by name
    assert fingerprint({1: "x", "a": 2}) != fingerprint({1: "y", "a": 2})  # keys json cannot sort together


def test_offers_are_built_once_per_source_object_and_key():
    built = []
    memo = PageCache(size=2)
    pools, equal_pools = (1, 2), tuple([1, 2])  # equal, but another object: counted again

    def build(tag):
        built.append(tag)
        return {"tag": tag}

    first = memo.get(pools, "cfg", lambda: build("a"))
    assert memo.get(pools, "cfg", lambda: build("again")) is first
    assert memo.get(pools, "other cfg", lambda: build("b"))["tag"] == "b"
    assert equal_pools is not pools and memo.get(equal_pools, "cfg", lambda: build("c"))["tag"] == "c"
    assert built == ["a", "b", "c"] and (memo.hits, memo.misses) == (1, 3)


def test_the_oldest_offers_go_first_and_a_used_one_stays():
    memo = PageCache(size=2)
    a, b, c = object(), object(), object()
    memo.get(a, 0, lambda: "a")
    memo.get(b, 0, lambda: "b")
    memo.get(a, 0, lambda: "a again")  # used: now the newest
    memo.get(c, 0, lambda: "c")  # b goes
    assert memo.get(a, 0, lambda: "rebuilt a") == "a"
    assert memo.get(b, 0, lambda: "rebuilt b") == "rebuilt b"


def test_memo_size_must_be_positive():
    with pytest.raises(ValueError, match="size must be at least 1"):
        PageCache(size=0)


def test_a_result_is_served_only_for_the_same_source_object_and_key():
    memo, offers = PageCache(), {"gpu": "offer"}
    assert memo.get(offers, ("alice", "{}"), lambda: "<form>") == "<form>"
    assert memo.get(offers, ("alice", "{}"), lambda: "rendered again") == "<form>"
    assert memo.get(offers, ("alice", '{"profile":"gpu"}'), lambda: "other options") == "other options"
    assert memo.get(dict(offers), ("alice", "{}"), lambda: "offers rebuilt") == "offers rebuilt"  # equal is not enough
