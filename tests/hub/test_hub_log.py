"""The capacity cache's lines reach the hub's log with time and level, INFO included, once each."""

from __future__ import annotations

import io
import logging

import pytest

from gpuspawner.capacity import labels
from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.capacity.warnonce import forget
from gpuspawner.hub import hub_log

from tests.builders import gpu_node


@pytest.fixture
def hub_logger():
    """A logger as JupyterHub's application sets it up: its own handler, time and level in each line."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("[%(levelname)1.1s %(asctime)s %(name)s] %(message)s"))
    hub = logging.getLogger("JupyterHub-under-test")
    hub.addHandler(handler)
    hub.setLevel(logging.INFO)
    hub.propagate = False
    logging.getLogger("gpuspawner").handlers.clear()  # conftest puts it back afterwards
    forget()
    yield hub, out
    hub.removeHandler(handler)
    forget()


def test_the_cache_logs_through_the_hub_with_time_and_level(hub_logger):
    hub, out = hub_logger
    assert hub_log.adopt(hub) is True
    logging.getLogger("gpuspawner.capacity.cache").info("capacity nodes informer synced at resourceVersion 7")
    logging.getLogger("gpuspawner.capacity.cache").warning("capacity pods watch failed")
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("[I 20") and lines[0].endswith("gpuspawner.capacity.cache] capacity nodes informer "
                                                                "synced at resourceVersion 7")
    assert lines[1].startswith("[W 20") and lines[1].endswith("capacity pods watch failed")
    assert hub_log.adopt(hub) is False  # once per process: no line written twice


def test_a_library_logger_with_only_a_null_handler_is_not_a_hub(hub_logger):
    """traitlets' fallback logger (a NullHandler) when no application runs: nothing is rerouted."""
    assert hub_log.adopt(logging.getLogger("traitlets")) is False
    assert logging.getLogger("gpuspawner").handlers == []


def test_an_admins_logging_configuration_wins(hub_logger):
    hub, out = hub_logger
    own = logging.NullHandler()
    logging.getLogger("gpuspawner").addHandler(own)
    assert hub_log.adopt(hub) is False
    assert logging.getLogger("gpuspawner").handlers == [own]


@pytest.mark.parametrize("allocatable, why", [
    ({"nvidia.com/gpu": "4e1000000"}, "node n1 is left out of the nvidia.com/gpu pool: its allocatable nvidia.com/gpu "
                                      "is not a count (quantity exponent out of range: '4e1000000')"),
    ({"nvidia.com/gpu": "four"}, "node n1 is left out of the nvidia.com/gpu pool: its allocatable nvidia.com/gpu is "
                                 "not a count (not a Kubernetes quantity: 'four'"),
], ids=["exponent-out-of-range", "not-a-quantity"])
def test_a_node_left_out_is_logged_once_with_why(hub_logger, allocatable, why):
    hub, out = hub_logger
    hub_log.adopt(hub)
    obj = gpu_node("n1")
    obj["status"]["allocatable"] = allocatable
    for _ in range(50):  # every status update of the node repeats the same object
        assert labels.node_record(obj, CapacityConfig()) is None
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("[W ") and why in lines[0]


def test_labels_that_are_not_texts_are_logged_once(hub_logger):
    hub, out = hub_logger
    hub_log.adopt(hub)
    obj = gpu_node("n1")
    obj["metadata"]["labels"] = {"nvidia.com/gpu.product": ["A100"], "ok": "x"}
    for _ in range(20):
        assert labels.node_record(obj, CapacityConfig()) is not None  # still counted
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 and "node n1: its labels are not a map of texts" in lines[0]
