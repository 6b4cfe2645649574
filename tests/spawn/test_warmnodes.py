"""The preferred node affinity toward the nodes of a pool that hold the server's image."""

from __future__ import annotations

import pytest

from gpuspawner.spawn.warmnodes import MAX_WARM_NODES, warm_node_order, warm_preferences
from tests.builders import node_view, pool_view


def _pool(*free: int):
    """A pool of nodes n0, n1, ... with ``free`` GPUs each."""
    return pool_view("a100", node_views=[node_view(f"n{i}", 8, f, "550.54.15", "12.4", "8.0")
                                         for i, f in enumerate(free)])


def _names(terms):
    return [t["preference"]["matchFields"][0]["values"][0] for t in terms]


@pytest.mark.parametrize(
    "warm, free, gpus, order",
    [
        ({"n2", "n0"}, (4, 4, 4), 1, ["n0", "n2"]),
        ({"n0", "n1", "n2"}, (0, 4, 1), 2, ["n1", "n0", "n2"]),  # room for 2 GPUs first, then by name
        ({"n9"}, (4,), 1, ["n9"]),  # not (yet) among the pool's counted nodes: still preferred, after
        (set(), (4, 4), 1, []),
        ({"n0", "Bad Name", "x" * 254, "a..b"}, (4,), 1, ["n0"]),  # only node names reach the pod spec
    ],
    ids=["by-name", "room-first", "unknown-node-last", "none-warm", "invalid-names-dropped"],
)
def test_warm_nodes_with_room_come_first(warm, free, gpus, order):
    assert warm_node_order(warm, _pool(*free), gpus) == order


def test_one_preferred_term_per_warm_node_by_name_never_required_and_bounded():
    warm = {f"n{i}" for i in range(40)}
    terms = warm_preferences(warm, _pool(*[4] * 40), 1)
    assert len(terms) == MAX_WARM_NODES
    # metadata.name takes one value per requirement: one term per node, all of the same weight
    assert terms[0] == {"weight": 50, "preference": {"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["n0"]}]}}
    assert {t["weight"] for t in terms} == {50}
    assert all(len(t["preference"]["matchFields"][0]["values"]) == 1 for t in terms)
    assert _names(warm_preferences({"n1", "n0"}, _pool(4, 4), 1, limit=1)) == ["n0"]
    assert warm_preferences(set(), _pool(4), 1) == []


def test_a_weight_outside_1_to_100_is_refused():
    with pytest.raises(ValueError, match="1 to 100"):
        warm_preferences({"n0"}, _pool(4), 1, weight=0)
