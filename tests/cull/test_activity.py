"""DCGM series -> each pod's GPU activity over a window: labels, units, coverage, shared devices,
and bad samples (a series holding one is no evidence: its pod is kept)."""

from __future__ import annotations

import pytest

from tests.builders.hubapi import dcgm_labels
from gpuspawner.cull.activity import (GPU_UTIL, GR_ENGINE, BadSample, SeriesWindow, StepMaxima, check_sample,
                                      device_of, pod_activity, pod_of)


@pytest.mark.parametrize("labels, pod", [
    (dcgm_labels("jupyter-alice"), ("jupyterhub", "jupyter-alice")),
    # Prometheus attached the exporter pod's own labels: the exported_* ones are the workload's
    (dcgm_labels("jupyter-alice", exported=True), ("jupyterhub", "jupyter-alice")),
    (dcgm_labels(None), None),  # a free GPU: no pod labels
], ids=["pod", "exported_pod", "free"])
def test_pod_of_reads_exported_labels_first(labels, pod):
    assert pod_of(labels) == pod


def test_device_of_tells_mig_instances_and_hosts_apart():
    a = device_of(dcgm_labels("p", mig="3"))
    b = device_of(dcgm_labels("p", mig="4"))
    c = device_of(dcgm_labels("p", host="node-2"))
    assert len({a, b, c, device_of(dcgm_labels("p"))}) == 4


def maxima(metric, samples, start=100.0, step=10.0, n=3) -> StepMaxima:
    steps = StepMaxima(metric, start, step, n)
    for t, v in samples:
        steps.put(steps.step_of(t), t, v)
    return steps


# steps of 10 s, n = 3: points[0] is (start-10, start], points[3] is (start+20, start+30]
@pytest.mark.parametrize("samples, points", [
    ([(95.0, 0.2), (100.0, 0.1), (105, 0.7), (130, 0.0)], [0.2, 0.7, None, 0.0]),
    ([(89.0, 1.0)], [None, None, None, None]),  # before the step ahead of the window
    ([(131.0, 1.0)], [None, None, None, None]),  # after now
], ids=["steps", "too-old", "future"])
def test_step_maxima_takes_each_steps_maximum(samples, points):
    assert maxima(GR_ENGINE, samples).points == points


def from_points(metric, points, start=100.0, step=10.0):
    steps = StepMaxima(metric, start, step, len(points) - 1)
    for k, v in enumerate(points):
        if v is not None:
            steps.put(k, start + k * step, v)
    return steps.window({})


@pytest.mark.parametrize("metric, points, peak, covered, why", [
    (GR_ENGINE, [0.0, 0.001, 0.004, 0.002], 0.004, True, None),
    (GPU_UTIL, [0, 0, 37, 0], 0.37, True, None),  # percent -> fraction
    (GR_ENGINE, [0.9, 0.0, 0.0, 0.0], 0.0, True, None),  # the step before the window is not counted
    (GR_ENGINE, [None, 0.0, 0.0, 0.0], 0.0, False, "no samples from before the window began"),
    (GR_ENGINE, [0.0, 0.0, None, 0.0], 0.0, False, "no samples for 10s at 110..120"),
    (GR_ENGINE, [None, None, None, None], None, False, "no samples from before the window began"),
], ids=["idle", "percent", "lead-step-excluded", "series-too-young", "gap", "empty"])
def test_window_from_step_maxima(metric, points, peak, covered, why):
    w = from_points(metric, points)
    assert (w.peak, w.covered, w.unusable) == (peak, covered, None)
    assert (why is None and w.why is None) or why in w.why


@pytest.mark.parametrize("metric, raw, value", [
    (GR_ENGINE, "0", 0.0), (GR_ENGINE, "0.25", 0.25), (GR_ENGINE, 1, 1.0), (GR_ENGINE, "1", 1.0),
    (GPU_UTIL, "100", 100.0), (GPU_UTIL, 37, 37.0), (GR_ENGINE, "1e-3", 0.001),
], ids=["zero", "ratio-string", "one-number", "one-string", "util-100", "util-number", "exponent"])
def test_check_sample_reads_finite_numbers_in_range(metric, raw, value):
    assert check_sample(metric, raw) == value


@pytest.mark.parametrize("metric, raw, words", [
    (GR_ENGINE, "NaN", '"NaN" is not a finite number'),
    (GR_ENGINE, float("nan"), "NaN is not a finite number"),
    (GR_ENGINE, "+Inf", '"+Inf" is not a finite number'),
    (GR_ENGINE, "-Inf", '"-Inf" is not a finite number'),
    (GR_ENGINE, "-0.5", '"-0.5" is outside 0..1'),
    (GR_ENGINE, "-1e-9", '"-1e-9" is outside 0..1'),
    (GR_ENGINE, "1.5", '"1.5" is outside 0..1'),
    (GPU_UTIL, "250", '"250" is outside 0..100'),
    (GPU_UTIL, -1, "-1 is outside 0..100"),
    (GR_ENGINE, None, "null is not a number"),
    (GR_ENGINE, "idle", '"idle" is not a number'),
    (GR_ENGINE, "", '"" is not a number'),
    (GR_ENGINE, True, "true is not a number"),
    (GR_ENGINE, False, "false is not a number"),
    (GR_ENGINE, [0], "[0] is not a number"),
    (GR_ENGINE, {"v": 0}, '{"v": 0} is not a number'),
    (GR_ENGINE, 10 ** 400, "is not a number"),
    (GR_ENGINE, "1e400", '"1e400" is not a finite number'),
    (GR_ENGINE, "0\n\x00", 'is not a number'),
], ids=["nan-string", "nan-float", "plus-inf", "minus-inf", "negative", "tiny-negative", "ratio-above-1",
        "util-above-100", "util-negative", "null", "word", "empty-string", "true", "false", "list", "object",
        "int-too-big-for-float", "overflows-to-inf", "control-characters"])
def test_check_sample_refuses_bad_data(metric, raw, words):
    with pytest.raises(BadSample) as e:
        check_sample(metric, raw)
    assert words in str(e.value)
    assert "\n" not in str(e.value) and "\x00" not in str(e.value)  # quoted for the log, never raw


@pytest.mark.parametrize("samples", [
    [(100, 0.0), (110, 0.0), (115, float("nan")), (120, 0.0), (130, 0.0)],
    [(100, 0.0), (110, 0.0), (120, float("-inf")), (130, 0.0)],
    [(100, 0.0), (110, -0.2), (120, 0.0), (130, 0.0)],
    [(100, float("nan")), (110, float("nan")), (120, float("nan")), (130, float("nan"))],
], ids=["one-nan-among-zeros", "minus-inf", "negative", "all-nan"])
def test_a_bad_sample_makes_the_series_unusable_not_idle(samples):
    w = maxima(GR_ENGINE, samples).window({})
    assert not w.covered and w.unusable and w.unusable.startswith("DCGM_FI_PROF_GR_ENGINE_ACTIVE: ")
    assert w.why == w.unusable


def test_unusable_names_the_first_bad_sample_and_counts_the_rest():
    w = maxima(GR_ENGINE, [(100, 0.0), (110, float("nan")), (120, -1.0), (130, float("inf"))]).window({})
    assert w.unusable == "DCGM_FI_PROF_GR_ENGINE_ACTIVE: NaN is not a finite number (at 110) and 2 more"


def _w(labels, peak, covered=True, metric=GR_ENGINE):
    return SeriesWindow(metric, labels, peak, covered, None if covered else "no samples for 10s")


def test_pod_activity_merges_both_metrics_per_device_and_keeps_the_higher():
    acts = pod_activity([_w(dcgm_labels("nb", uuid="GPU-a"), 0.0),
                         _w(dcgm_labels("nb", uuid="GPU-a"), 0.42, metric=GPU_UTIL),
                         _w(dcgm_labels("nb", uuid="GPU-b"), 0.001)])
    devices = acts[("jupyterhub", "nb")].devices
    assert [round(d.peak, 3) for d in devices] == [0.42, 0.001]
    assert acts[("jupyterhub", "nb")].peak == 0.42


def test_pod_activity_counts_a_device_covered_when_any_of_its_series_is():
    acts = pod_activity([_w(dcgm_labels("nb"), 0.0, covered=False), _w(dcgm_labels("nb"), 0.0, metric=GPU_UTIL)])
    assert acts[("jupyterhub", "nb")].devices[0].covered


def test_pod_activity_marks_devices_reported_for_several_pods_as_shared():
    acts = pod_activity([_w(dcgm_labels("a", uuid="GPU-s"), 0.0), _w(dcgm_labels("b", uuid="GPU-s"), 0.0),
                         _w(dcgm_labels("c", uuid="GPU-own"), 0.0), _w(dcgm_labels(None, uuid="GPU-free"), 0.0)])
    assert acts[("jupyterhub", "a")].devices[0].shared_with == (("jupyterhub", "b"),)
    assert acts[("jupyterhub", "c")].devices[0].shared_with == ()
    assert set(acts) == {("jupyterhub", "a"), ("jupyterhub", "b"), ("jupyterhub", "c")}


@pytest.mark.parametrize("bad", [
    SeriesWindow(GR_ENGINE, dcgm_labels("nb"), 0.0, False, "x", "DCGM_FI_PROF_GR_ENGINE_ACTIVE: NaN ..."),
    SeriesWindow(GR_ENGINE, dcgm_labels("nb"), float("nan"), True),  # another source's unchecked peak
    SeriesWindow(GR_ENGINE, dcgm_labels("nb"), -0.1, True),
    SeriesWindow(GR_ENGINE, dcgm_labels("nb"), float("inf"), True),
], ids=["unusable-series", "nan-peak", "negative-peak", "inf-peak"])
def test_a_device_with_an_unusable_series_is_unusable_whatever_its_other_series_say(bad):
    acts = pod_activity([_w(dcgm_labels("nb"), 0.0, metric=GPU_UTIL), bad])
    device = acts[("jupyterhub", "nb")].devices[0]
    assert device.unusable and not device.covered and device.peak is None
    assert acts[("jupyterhub", "nb")].unusable is device
