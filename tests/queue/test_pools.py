"""Queued pools on the spawn page and in ``GET /hub/api/gpus`` (gpuspawner.queue.pools): a full pool
with a queue can be chosen; its card and its ``"queue"`` JSON.  Pure."""

from __future__ import annotations

import pytest

from gpuspawner.queue.pools import full_card_text, ordinal, pool_queue, queue_offers
from gpuspawner.queue.rules import parse_rules
from gpuspawner.spawn.options import OptionError, validate_user_options
from gpuspawner.spawn.profiles import merge_profiles
from tests.builders import gpu_offers, node_view, pool_view

FULL_A100 = pool_view("a100", node_views=(node_view("a1", 4, 0), node_view("a2", 2, 0)))
FREE_T4 = pool_view("t4", "Tesla-T4", nodes=1, total=4, free=4, per_node=4)
PROFILES = [{"slug": "gpu", "kubespawner_override": {"image": "pt:cu124"}}]
RULES = parse_rules([{"match": "a100:*", "queue": "gpu-a100"}])


def test_a_full_pool_with_a_queue_can_be_chosen_for_as_many_gpus_as_its_biggest_node_holds():
    offers = queue_offers(gpu_offers(PROFILES, FULL_A100, FREE_T4), RULES)
    a100 = offers["gpu"].pool(FULL_A100.id)
    assert (a100.available, a100.max_gpus, a100.now, a100.reason) == (True, 4, 0, None)
    profiles, _ = merge_profiles([], offers)
    selection = validate_user_options({"profile": "gpu", "gpu_pool": FULL_A100.id, "gpus": 2}, profiles, offers)
    assert (selection.pool.pool.id, selection.gpus) == (FULL_A100.id, 2)


def test_without_a_queue_a_full_pool_is_still_refused():
    offers = queue_offers(gpu_offers(PROFILES, FULL_A100, FREE_T4), ())
    profiles, _ = merge_profiles([], offers)
    with pytest.raises(OptionError, match="cannot give any GPU now"):
        validate_user_options({"profile": "gpu", "gpu_pool": FULL_A100.id}, profiles, offers)


def test_a_queue_never_offers_more_than_the_profile_allows_or_a_pool_without_gpus():
    capped = [{**PROFILES[0], "max_gpus": 1}]
    offers = queue_offers(gpu_offers(capped, FULL_A100), RULES)
    assert offers["gpu"].pool(FULL_A100.id).max_gpus == 1
    empty = pool_view("a100", nodes=0, total=0, free=0, per_node=0)
    offers = queue_offers(gpu_offers(PROFILES, empty), RULES)
    assert offers["gpu"].pool(empty.id).available is False


def test_pools_with_room_are_left_as_they_are():
    offers = gpu_offers(PROFILES, FREE_T4)
    assert queue_offers(offers, parse_rules([{"match": "*", "queue": "q"}]))["gpu"] is offers["gpu"]


@pytest.mark.parametrize(
    "pool_id, counts, expected",
    [
        pytest.param("a100:x:nvidia.com/gpu", (3, 2), {"name": "gpu-a100", "pending": 3, "admitted": 2}, id="queued"),
        pytest.param("a100:x:nvidia.com/gpu", None, {"name": "gpu-a100", "pending": None, "admitted": None},
                     id="not-read-yet"),
        pytest.param("t4:x:nvidia.com/gpu", (0, 0), None, id="not-queued"),
    ],
)
def test_the_pools_queue_in_the_api(pool_id, counts, expected):
    assert pool_queue(RULES, pool_id, lambda queue: counts) == expected


def test_a_rule_for_some_profiles_still_gives_the_pool_its_queue():
    rules = parse_rules([{"match": "a100:*", "profiles": ["train"], "queue": "gpu-a100"}])
    assert pool_queue(rules, "a100:x:nvidia.com/gpu", lambda q: (1, 1))["name"] == "gpu-a100"


@pytest.mark.parametrize(
    "pending, text",
    [
        pytest.param(3, "Full — 3 waiting; you would be 4th", id="three"),
        pytest.param(0, "Full — nobody waiting; you would be 1st", id="none"),
        pytest.param(1, "Full — 1 waiting; you would be 2nd", id="one"),
        pytest.param(10, "Full — 10 waiting; you would be 11th", id="eleventh"),
        pytest.param(None, "Full — you can queue for a GPU here", id="unknown"),
    ],
)
def test_the_full_cards_words(pending, text):
    assert full_card_text(pending) == text


@pytest.mark.parametrize("n, word", [(1, "1st"), (2, "2nd"), (3, "3rd"), (4, "4th"), (11, "11th"), (12, "12th"),
                                     (13, "13th"), (21, "21st"), (22, "22nd"), (111, "111th")])
def test_ordinal(n, word):
    assert ordinal(n) == word
