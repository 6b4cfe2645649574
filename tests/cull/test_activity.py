"""DCGM series -> each pod's GPU activity over a window: labels, units, coverage, shared devices."""

from __future__ import annotations

import pytest

from tests.builders.hubapi import dcgm_labels
from gpuspawner.cull.activity import (GPU_UTIL, GR_ENGINE, SeriesWindow, device_of, pod_activity, pod_of,
                                      points_from_samples, window_from_points)


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


# steps of 10 s, n = 3: points[0] is (start-10, start], points[3] is (start+20, start+30]
@pytest.mark.parametrize("samples, points", [
    ([(95.0, 0.2), (100.0, 0.1), (105, 0.7), (130, 0.0)], [0.2, 0.7, None, 0.0]),
    ([(89.0, 1.0)], [None, None, None, None]),  # before the step ahead of the window
    ([(131.0, 1.0)], [None, None, None, None]),  # after now
], ids=["steps", "too-old", "future"])
def test_points_from_samples_takes_each_steps_maximum(samples, points):
    assert points_from_samples(samples, start=100.0, step=10.0, n=3) == points


@pytest.mark.parametrize("metric, points, peak, covered, why", [
    (GR_ENGINE, [0.0, 0.001, 0.004, 0.002], 0.004, True, None),
    (GPU_UTIL, [0, 0, 37, 0], 0.37, True, None),  # percent -> fraction
    (GR_ENGINE, [0.9, 0.0, 0.0, 0.0], 0.0, True, None),  # the step before the window is not counted
    (GR_ENGINE, [None, 0.0, 0.0, 0.0], 0.0, False, "no samples from before the window began"),
    (GR_ENGINE, [0.0, 0.0, None, 0.0], 0.0, False, "no samples for 10s at 110..120"),
    (GR_ENGINE, [None, None, None, None], None, False, "no samples from before the window began"),
], ids=["idle", "percent", "lead-step-excluded", "series-too-young", "gap", "empty"])
def test_window_from_points(metric, points, peak, covered, why):
    w = window_from_points(metric, {}, points, start=100.0, step=10.0)
    assert (w.peak, w.covered) == (peak, covered)
    assert (why is None and w.why is None) or why in w.why


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
