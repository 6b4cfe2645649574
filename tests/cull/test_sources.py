"""The two GPU activity sources: Prometheus' range-query answers, and the culler's own scrapes
of exporter pods (a real HTTP server serving the simulated exporter's text, a fake clock)."""

from __future__ import annotations

import pytest
from aiohttp import web

from tests.builders.prometheus import HOSTILE, UNAVAILABLE, FakePrometheus, Query, matrix
from gpuspawner.cull.activity import ACTIVITY_METRICS, GR_ENGINE, SourceError, plan_steps
from gpuspawner.cull.prometheus import PrometheusSource, windows_from_matrix
from gpuspawner.cull.scrape import ScrapeSource, exporter_targets, parse_exposition
from testcluster.node.dcgm_exporter import render


def test_windows_from_matrix_places_points_by_time_and_sees_gaps():
    start, step, n = 1000.0, 10.0, 3
    full = {"metric": {"__name__": "x", "exported_pod": "a"}, "values": [[1000, "0"], [1010, "0.002"],
                                                                         [1020, "0"], [1030, "0"]]}
    gap = {"metric": {"exported_pod": "b"}, "values": [[1000, "0"], [1010, "0"], [1030, "0"]]}
    young = {"metric": {"exported_pod": "c"}, "values": [[1020.0, "0.5"], [1030.0, "0"]]}
    a, b, c = windows_from_matrix(GR_ENGINE, matrix(full, gap, young), start, step, n)
    assert (a.labels, a.peak, a.covered) == ({"exported_pod": "a"}, 0.002, True)
    assert (b.covered, c.covered, c.peak) == (False, False, 0.5)


@pytest.mark.parametrize("doc, words", [
    ({"status": "error", "errorType": "bad_data", "error": "parse error"}, "parse error"),
    ({"status": "success", "data": {"resultType": "vector", "result": []}}, "no matrix"),
    ("<html>", "answered an error"),
    ({"status": "success", "data": []}, "no matrix"),
    ({"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {"pod": 1}, "values": []}]}},
     "labels must be a map of strings"),
    ({"status": "success", "data": {"resultType": "matrix", "result": ["x"]}}, "labels must be a map of strings"),
], ids=["error", "vector", "not-an-object", "data-a-list", "label-a-number", "series-a-string"])
def test_prometheus_errors_are_source_errors(doc, words):
    with pytest.raises(SourceError, match=words):
        windows_from_matrix(GR_ENGINE, doc, 0, 1, 1)


def test_a_bad_point_makes_only_its_series_unusable():
    start, step, n = 1000.0, 10.0, 3
    good = {"metric": {"exported_pod": "a"}, "values": [[1000 + 10 * k, "0"] for k in range(4)]}
    bad = {"metric": {"exported_pod": "b"}, "values": [[1000, "0"], [1010, "NaN"], [1020, "0"], [1030, "0"]]}
    a, b = windows_from_matrix(GR_ENGINE, matrix(good, bad), start, step, n)
    assert a.covered and a.unusable is None
    assert not b.covered and b.unusable == 'DCGM_FI_PROF_GR_ENGINE_ACTIVE: "NaN" is not a finite number (at 1010)'


PODS = {"jupyter-alice": "idle", "jupyter-bob": "busy"}


@pytest.mark.parametrize("case", list(HOSTILE), ids=list(HOSTILE))
async def test_every_hostile_answer_is_unusable_or_unavailable_never_evidence(case):
    """Through the real client and HTTP: a hostile answer either spoils the series it is in (their pods'
    windows are unusable) or the whole answer (a SourceError); no exception of any other kind."""
    hostile = HOSTILE[case]
    with FakePrometheus(PODS, hostile.respond) as prom:
        source = PrometheusSource(prom.url, step=1)
        try:
            if hostile.verdict == UNAVAILABLE:
                with pytest.raises(SourceError):
                    await source.windows(5, now=1_000_000.0)
                return
            windows = await source.windows(5, now=1_000_000.0)
        finally:
            await source.close()
    idle = [w for w in windows if w.labels.get("exported_pod") == "jupyter-alice"]
    assert idle and any(w.unusable for w in idle) and not any(w.covered and w.unusable for w in windows)


def test_a_query_from_the_culler_is_read_back_by_the_fake():
    q = Query.parse({"query": "max_over_time(DCGM_FI_DEV_GPU_UTIL[1000ms])", "start": "995", "end": "1000",
                     "step": "1"})
    assert (q.metric, q.times) == ("DCGM_FI_DEV_GPU_UTIL", [995.0, 996.0, 997.0, 998.0, 999.0, 1000.0])
    assert q.metric in ACTIVITY_METRICS


async def test_an_answer_over_the_size_limit_is_a_source_error():
    with FakePrometheus(PODS) as prom:
        source = PrometheusSource(prom.url, step=1, max_bytes=1000)
        try:
            with pytest.raises(SourceError, match="answered more than 0 MiB: raise --metrics-step"):
                await source.windows(600, now=1_000_000.0)
        finally:
            await source.close()


def test_plan_steps_stays_under_prometheus_point_limit():
    assert plan_steps(3600, 60) == (60, 60)
    assert plan_steps(10, 4) == (4, 3)  # the window is rounded up to whole steps
    step, n = plan_steps(30 * 86400, 1)
    assert n <= 10_000 and step * n >= 30 * 86400


async def test_prometheus_source_queries_max_over_time_per_step():
    seen = []

    async def query_range(request):
        seen.append(dict(request.query))
        return web.json_response(matrix())
    app = web.Application()
    app.router.add_get("/api/v1/query_range", query_range)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    source = PrometheusSource(f"http://127.0.0.1:{port}/", step=2)
    try:
        assert await source.windows(20, now=1_000_000.0) == []
    finally:
        await source.close()
        await runner.cleanup()
    assert [q["query"] for q in seen] == ["max_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE[2000ms])",
                                         "max_over_time(DCGM_FI_DEV_GPU_UTIL[2000ms])"]
    assert seen[0]["start"] == "999980.000" and seen[0]["end"] == "1000000.000" and seen[0]["step"] == "2.000"


async def test_an_unreachable_prometheus_is_a_source_error():
    source = PrometheusSource("http://127.0.0.1:9", timeout=5)
    try:
        with pytest.raises(SourceError, match="cannot query Prometheus"):
            await source.windows(60, now=1000.0)
    finally:
        await source.close()


REPORT = {"node": "n1", "driverVersion": "570.172.08", "gpus": [
    {"index": 0, "uuid": "GPU-a", "device": "nvidia0", "modelName": "NVIDIA A100-SXM4-40GB", "pciBusId": "",
     "instances": [], "holders": [{"pod": "jupyter-alice", "namespace": "jupyterhub", "container": "notebook"}],
     "fields": {"DCGM_FI_DEV_GPU_UTIL": 0, "DCGM_FI_DEV_FB_USED": 512, "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.0}}]}


def test_parse_exposition_keeps_only_the_activity_metrics():
    samples = parse_exposition(render(REPORT, "n1"))
    assert sorted(m for m, _, _ in samples) == ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"]
    assert all(labels["pod"] == "jupyter-alice" for _, labels, _ in samples)


def test_exporter_targets_are_running_pods_with_an_ip():
    pods = [{"metadata": {"name": "a"}, "status": {"phase": "Running", "podIP": "127.9.0.2"}},
            {"metadata": {"name": "b"}, "status": {"phase": "Pending"}},
            {"metadata": {"name": "c", "deletionTimestamp": "x"}, "status": {"phase": "Running", "podIP": "1.2.3.4"}}]
    assert exporter_targets(pods, 9400) == [("a", "http://127.9.0.2:9400/metrics")]


async def test_scrape_source_keeps_samples_and_answers_windows_from_them():
    state = {"up": True}

    async def metrics(_request):
        if not state["up"]:
            return web.Response(status=503)
        text = render(REPORT, "n1")
        if state.get("nan"):
            text = "\n".join(line.rsplit(" ", 1)[0] + " NaN" if line.startswith("DCGM_FI_") else line
                             for line in text.splitlines()) + "\n"
        return web.Response(text=text, content_type="text/plain")
    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    now = [1000.0]

    async def exporters():
        return [{"metadata": {"name": "exp"}, "status": {"phase": "Running", "podIP": "127.0.0.1"}}]
    source = ScrapeSource(exporters, port=port, step=2, keep=10, clock=lambda: now[0])
    try:
        for _ in range(8):  # a sample every second for 8 s
            assert await source.collect() == 1
            now[0] += 1
        windows = await source.windows(6, now=now[0] - 1)
        assert {w.metric for w in windows} == {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"}
        assert all(w.covered and w.peak == 0.0 for w in windows)
        state["nan"] = True  # the exporter writes NaN: its series are unusable, not idle
        assert await source.collect() == 1
        assert all(w.unusable and "NaN is not a finite number" in w.unusable
                   for w in await source.windows(6, now=now[0]))
        now[0] += 1
        state["nan"] = False
        state["up"] = False  # the exporter stops answering: a gap, so nothing counts as covered
        for _ in range(4):
            assert await source.collect() == 0
            now[0] += 1
        assert not any(w.covered for w in await source.windows(6, now=now[0] - 1))
    finally:
        await source.close()
        await runner.cleanup()
