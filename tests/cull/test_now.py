"""What the home page reads of a GPU server now (``cull.now``): the instant query, its answer read into
devices (bad data never shown as a number), the figures users see, and when the idle rule stops it."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import pytest

from gpuspawner.cull.now import FB_FREE, FB_USED, instant_query, readings, server_now, stop_words
from gpuspawner.cull.idle_timeouts import AppliedRule
from tests.builders.prometheus import GPU_UTIL, GR_ENGINE, matrix, sample, vector

POD = ("jupyterhub", "jupyter-ada")
NOW = datetime(2026, 11, 27, 12, 0, tzinfo=timezone.utc)


def gpu(pod="jupyter-ada", *, util="37", ratio="0.37", used="12288", free="69632", uuid="GPU-0"):
    """One GPU's four series, as Prometheus answers an instant query (None: that series is absent)."""
    out = []
    for metric, value in ((GPU_UTIL, util), (GR_ENGINE, ratio), (FB_USED, used), (FB_FREE, free)):
        if value is not None:
            out.append(sample(metric, pod, value, uuid=uuid))
    return out


def test_the_query_asks_for_the_pods_under_either_label_and_escapes_dots():
    q = instant_query([POD, ("jupyterhub", "jupyter-b.c"), ("jupyterhub", 'x"} or up{a="')])
    assert q is not None
    assert 'exported_pod=~"jupyter-ada|jupyter-b\\\\.c"' in q and 'pod=~"jupyter-ada|jupyter-b\\\\.c"' in q
    assert '"}' not in q.replace('c"}', "")  # the hostile name is left out, not quoted into the query
    assert "DCGM_FI_DEV_FB_USED" in q and "DCGM_FI_DEV_GPU_UTIL" in q
    assert instant_query([("ns", "Not A Pod")]) is None


READ_CASES = {
    "one-gpu": (vector(*gpu()), [(0.37, 12288.0, 69632.0, None)]),
    "two-gpus": (vector(*gpu(), *gpu(util="80", ratio="0.9", uuid="GPU-1")),
                 [(0.37, 12288.0, 69632.0, None), (0.9, 12288.0, 69632.0, None)]),
    "util-only": (vector(*gpu(ratio=None)), [(0.37, 12288.0, 69632.0, None)]),
    "nan-util": (vector(*gpu(util="NaN")), [(0.37, 12288.0, 69632.0, "DCGM_FI_DEV_GPU_UTIL: \"NaN\" is not a finite number")]),
    "negative-memory": (vector(*gpu(used="-1")), [(0.37, None, 69632.0, "DCGM_FI_DEV_FB_USED: \"-1\" is not a size in MiB")]),
    "value-not-a-pair": (vector({"metric": gpu()[0]["metric"], "value": "37"}),
                         [(None, None, None, "DCGM_FI_DEV_GPU_UTIL: \"37\" is not [time, value]")]),
}


@pytest.mark.parametrize("doc,devices", READ_CASES.values(), ids=READ_CASES)
def test_an_answer_is_read_into_each_pods_devices(doc, devices):
    got = readings(doc)
    assert isinstance(got, dict) and list(got) == [POD]
    assert [(d.busy, d.used_mib, d.free_mib, d.bad) for d in got[POD]] == devices


def test_series_of_other_pods_and_free_gpus_are_kept_apart():
    doc = vector(*gpu("jupyter-bob"), {"metric": {"__name__": GPU_UTIL, "UUID": "GPU-free"}, "value": [1, "0"]})
    assert list(readings(doc)) == [("jupyterhub", "jupyter-bob")]


BROKEN = {
    "error": ({"status": "error", "error": "bad query"}, "Prometheus answered an error"),
    "matrix": (matrix(), "no vector"),
    "not-a-map": ([], "Prometheus answered an error"),
    "labels-not-strings": (vector({"metric": {"pod": 1}, "value": [1, "0"]}), "malformed series"),
}


@pytest.mark.parametrize("doc,words", BROKEN.values(), ids=BROKEN)
def test_an_answer_that_is_not_the_apis_says_why(doc, words):
    got = readings(doc)
    assert isinstance(got, str) and words in got


FIGURES = {
    "one-gpu": (gpu(), 1, ("37%", "12.0 of 80.0 GiB", True)),
    "idle": (gpu(util="0", ratio="0.001"), 1, ("0%", "12.0 of 80.0 GiB", False)),
    "two-gpus-averaged": (gpu() + gpu(util="80", ratio="0.9", uuid="GPU-1"), 2,
                          ("64% on average over 2 GPUs", "24.0 of 160.0 GiB", True)),
    "one-of-two-reported": (gpu(), 2, ("37% (1 of its 2 GPUs reported)", "12.0 of 80.0 GiB (1 of its 2 GPUs reported)",
                                       True)),
    "bad-data": (gpu(util="+Inf"), 1, ("not available (the GPU metrics hold bad data)",) * 2 + (None,)),
    "no-memory": (gpu(free=None), 1, ("37%", "not available (no memory reported)", True)),
    "nothing": ([], 1, ("not available (no GPU metrics for this server yet)",) * 2 + (None,)),
}


@pytest.mark.parametrize("series,gpus,want", FIGURES.values(), ids=FIGURES)
def test_the_figures_users_read(series, gpus, want):
    devices = readings(vector(*series)).get(POD) if series else None
    got = server_now(devices, gpus, 0.01)
    assert (got.use, got.memory, got.busy) == want
    assert "nan" not in (got.use + got.memory).lower() and "inf" not in got.use.lower()


def test_no_source_says_why_for_each_figure():
    got = server_now(None, 1, 0.01, "the hub reads no GPU metrics")
    assert got.use == got.memory == "not available (the hub reads no GPU metrics)" and got.busy is None


HOUR = AppliedRule(idle_timeout=3600, max_age=0, timeout_from="default")
STOPS = {
    "busy-now": (HOUR, NOW - timedelta(minutes=5), True,
                 "Its GPUs are in use now, so it is not stopped as idle before 13:00 UTC (60m without notebook or "
                 "GPU use)."),
    "idle-recently-used": (HOUR, NOW - timedelta(minutes=20), False,
                           "Stopped as idle at 12:40 UTC at the earliest: 60m after its last notebook activity, if "
                           "its GPUs stay idle too."),
    "idle-long-unused": (HOUR, NOW - timedelta(hours=3), None,
                         "Stopped as idle once its GPUs have been idle for 60m: its notebook has not been used for "
                         "3h00m."),
    "max-age": (AppliedRule(3600, 86400, "default"), NOW - timedelta(minutes=20), False,
                "Stopped as idle at 12:40 UTC at the earliest: 60m after its last notebook activity, if its GPUs "
                "stay idle too. Stopped at 28 Nov at 11:00 UTC in any case (at most 24h00m per server)."),
}


@pytest.mark.parametrize("rule,last,busy,words", STOPS.values(), ids=STOPS)
def test_when_the_idle_rule_would_stop_it(rule, last, busy, words):
    assert stop_words(rule, NOW, last, NOW - timedelta(hours=1), busy) == words


def test_no_figure_is_a_nan():
    assert not any(isinstance(v, float) and math.isnan(v) for d in readings(vector(*gpu(util="NaN")))[POD]
                   for v in (d.busy, d.used_mib, d.free_mib))
