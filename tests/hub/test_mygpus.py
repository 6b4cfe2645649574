"""The home page's "Your GPU servers" in a JupyterHub MockHub: a running GPU server's model, count and pool,
its GPU use and memory from Prometheus (as the culler reads it) and when the idle rule would stop it; and
each way the figures can be missing, said in words, never a 500 or a NaN."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from jupyterhub import orm
from tornado.httpclient import AsyncHTTPClient

from gpuspawner.hub import mygpus
from gpuspawner.hub.spawner import GPUSpawnInfo
from tests.builders.prometheus import FakePrometheus, sample, vector
from tests.hub.test_handlers import A100, fake_cache, load_snippet, login

POD_NAME = "jupyter-user"


def running(app, gpus=2):
    """The user's default server, marked running on two A100s of pool ``A100`` (as a GPU spawn leaves it)."""
    spawner = app.users["user"].spawner
    spawner._gpu_spawn = GPUSpawnInfo(pool_id=A100.id, pool_name=A100.display_name, resource="nvidia.com/gpu",
                                      gpus=gpus)
    server = orm.Server()
    app.db.add(server)
    spawner.orm_spawner.server = server
    spawner.orm_spawner.last_activity = datetime.utcnow() - timedelta(minutes=20)
    spawner.orm_spawner.started = datetime.utcnow() - timedelta(hours=1)
    app.db.commit()

    async def still_running():  # the home page polls it; no cluster here to ask
        return None

    spawner.poll = still_running
    return spawner


def gpu_series(uuid, util, used, free=None):
    """One 80 GiB GPU's series: utilisation (%), memory used and free (MiB; free: the rest of 80 GiB)."""
    free = free if free is not None else str(81920 - int(used))
    return [sample("DCGM_FI_DEV_GPU_UTIL", POD_NAME, util, uuid=uuid),
            sample("DCGM_FI_DEV_FB_USED", POD_NAME, used, uuid=uuid),
            sample("DCGM_FI_DEV_FB_FREE", POD_NAME, free, uuid=uuid)]


async def home_page(mock_hub, c, install_cache):
    mygpus._memo.clear()
    c.GPUSpawner.namespace = "jupyterhub"  # the exporter's series name the pod in this namespace
    served = await mock_hub(c)
    install_cache(fake_cache(A100))
    cookie = await login(served.hub_url, "user")
    running(served.app)
    r = await AsyncHTTPClient().fetch(served.hub_url + "home", headers={"Cookie": cookie}, request_timeout=30)
    return r.code, r.body.decode()


def section(page: str) -> str:
    start = page.index('id="gpuspawner-gpu-servers"')
    return page[start:page.index("</ul>", start)]


async def test_a_running_gpu_server_shows_its_model_pool_use_memory_and_idle_stop(no_kube_client, install_cache, mock_hub):
    with FakePrometheus(instant=vector(*gpu_series("GPU-0", "40", "16384"), *gpu_series("GPU-1", "20", "8192"))) as prom:
        c = load_snippet()
        c.GPUSpawner.gpu_prometheus_url = prom.url
        c.GPUSpawner.gpu_cull_rules = {"idle_timeout": "1h"}
        code, page = await home_page(mock_hub, c, install_cache)
    assert code == 200
    part = section(page)
    assert "2 \u00d7 NVIDIA A100 80GB" in part
    assert "a100" in part  # the pool's node group
    assert "30% on average over 2 GPUs" in part
    assert "24.0 of 160.0 GiB" in part
    assert "Its GPUs are in use now, so it is not stopped as idle before" in part
    assert 'exported_pod=~"jupyter-user"' in prom.instant_queries[0]


CASES = {
    # (instant answer, or None for no Prometheus configured; what the page says instead of figures)
    "no-source": (None, "GPU use is not shown: this hub reads no GPU metrics.",
                  "not available (the hub reads no GPU metrics)"),
    "prometheus-error": ({"status": "error", "error": "query timed out"},
                         "GPU use cannot be read right now", "not available (the GPU metrics could not be read)"),
    "nan-samples": (vector(*gpu_series("GPU-0", "NaN", "NaN", "NaN"), *gpu_series("GPU-1", "NaN", "NaN", "NaN")), None,
                    "not available (the GPU metrics hold bad data)"),
    "no-series-yet": (vector(), None, "not available (no GPU metrics for this server yet)"),
    "not-json": (lambda q: (200, b"<html>proxy</html>", "text/html"), "GPU use cannot be read right now",
                 "not available (the GPU metrics could not be read)"),
}


@pytest.mark.parametrize("answer,note,figure", CASES.values(), ids=CASES)
async def test_missing_figures_are_said_in_words(no_kube_client, install_cache, mock_hub, answer, note, figure):
    c = load_snippet()
    prom = FakePrometheus(instant=answer) if answer is not None else None
    try:
        if prom is not None:
            c.GPUSpawner.gpu_prometheus_url = prom.url
        code, page = await home_page(mock_hub, c, install_cache)
    finally:
        if prom is not None:
            prom.stop()
    assert code == 200
    part = section(page)
    assert "2 \u00d7 NVIDIA A100 80GB" in part
    assert part.count(figure) == 2  # GPU use and GPU memory
    assert (note in part) if note else ("gs-gpu-note" not in part)
    assert "NaN" not in part and "nan%" not in part and "When idle" not in part  # no culler rules configured


async def test_prometheus_that_does_not_answer_in_time_still_gives_the_page(no_kube_client, install_cache,
                                                                            monkeypatch, mock_hub):
    import time

    monkeypatch.setattr(mygpus, "TIMEOUT", 0.5)

    def slow(q):
        time.sleep(2)
        return 200, b"{}", "application/json"

    with FakePrometheus(instant=slow) as prom:
        c = load_snippet()
        c.GPUSpawner.gpu_prometheus_url = prom.url
        code, page = await home_page(mock_hub, c, install_cache)
    assert code == 200
    assert "GPU use cannot be read right now" in section(page)


async def test_no_section_without_a_running_gpu_server(no_kube_client, install_cache, mock_hub):
    mygpus._memo.clear()
    served = await mock_hub(load_snippet())
    install_cache(fake_cache(A100))
    cookie = await login(served.hub_url, "user")
    r = await AsyncHTTPClient().fetch(served.hub_url + "home", headers={"Cookie": cookie}, request_timeout=30)
    assert r.code == 200 and 'id="start"' in r.body.decode()
    assert "gpuspawner-gpu-servers" not in r.body.decode()
