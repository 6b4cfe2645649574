"""End to end: GPU-hour budgets on a real JupyterHub over the test cluster (Kubernetes' own control plane,
the node agent's nodes), on SQLite and PostgreSQL.

A budget of 0.01 GPU-hours an hour; a server runs past it (the hub does not stop it; the home page warns
and the culler stops it, as gpu_hour_stop_when_spent asks); the next spawn is refused
with 403 and the time GPU-hours come back; the hub restarts and the usage is kept; a server's pod is
deleted while the hub is down (a crash) and while it runs, and both holdings are closed once; the
hub's clock (the ledger's clock seam, moved through a file) passes the window, and a spawn is allowed.
"""

from __future__ import annotations

import re
import shutil
import textwrap
from datetime import datetime, timedelta

import pytest
import requests

from .cullenv import CULLER_ROLE_SCOPES, CullHub
from .harness import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.hub]

if not shutil.which("configurable-http-proxy"):
    pytest.skip("configurable-http-proxy is not installed: run scripts/setup.sh", allow_module_level=True)

SITE_CONFIG = """
# the GPU-hour budgets under test
c.GPUSpawner.gpu_hour_budgets = [
    {{"scope": "everyone", "gpu_hours": 0.01, "window": "1h"}},
    {{"scope": "user:bob", "gpu_hours": 100, "window": "1h"}},
]
c.GPUSpawner.gpu_hour_minimum_minutes = 0
c.GPUSpawner.gpu_hour_stop_when_spent = True  # the culler stops a server whose budget is spent
c.Spawner.poll_interval = 2  # the hub notices a pod deleted behind its back within seconds
{database}
# the ledger's clock seam: the test moves the hub's time on through a file
import pathlib as _pathlib
from datetime import datetime as _datetime, timedelta as _timedelta, timezone as _timezone
from gpuspawner.usage.clock import set_source
_offset = _pathlib.Path({offset!r})

def _now():
    try:
        seconds = float(_offset.read_text() or 0)
    except (OSError, ValueError):
        seconds = 0.0
    return _datetime.now(_timezone.utc) + _timedelta(seconds=seconds)

set_source(_now)
"""


class UsageHub(CullHub):
    """The culler's hub environment (a cluster that outlives hub restarts) with budgets and a movable clock."""

    culler_scopes = [*CULLER_ROLE_SCOPES, "custom:gpu-usage:read"]

    def __init__(self, db_url: str | None):
        super().__init__()
        self.offset = self.dir / "clock-offset"
        self.offset.write_text("0")
        database = f"c.JupyterHub.db_url = {db_url!r}" if db_url else ""
        self.site_config = textwrap.dedent(SITE_CONFIG.format(database=database, offset=str(self.offset)))

    def move_clock(self, seconds: float) -> None:
        self.offset.write_text(str(float(self.offset.read_text()) + seconds))

    def hub_now(self) -> datetime:
        from datetime import timezone

        return datetime.now(timezone.utc) + timedelta(seconds=float(self.offset.read_text()))

    def gpu_hours(self, user: str) -> dict:
        r = self.api("GET", f"/users/{user}/gpu-usage")
        assert r.status_code == 200, r.text
        return r.json()

    def delete_pod(self, user: str) -> None:
        name = self.pod_of(user)["metadata"]["name"]
        r = self.k8s.delete(f"{self.k8s_url}/api/v1/namespaces/jupyterhub/pods/{name}", timeout=30,
                            json={"gracePeriodSeconds": 0})
        assert r.status_code in (200, 202), r.text
        wait_for(lambda: not [p for p in self.pods("jupyterhub") if p["metadata"]["name"] == name], 60,
                 f"pod {name} to be gone")


def whole_gpu_pool(hub: UsageHub) -> str:
    for p in hub.gpus()["pools"]:
        if p["resource"] == "nvidia.com/gpu" and "MIG" not in (p["product"] or "") \
                and not (p["product"] or "").endswith("SHARED") and p["max_free_per_node"] >= 1:
            return p["id"]
    raise AssertionError(f"no pool of whole NVIDIA GPUs: {hub.gpus()}")


def spawn(hub: UsageHub, user: str, pool: str) -> requests.Response:
    hub.create_user(user)
    return hub.api("POST", f"/users/{user}/server", json={"profile": "gpu", "gpu_pool": pool, "gpus": 1})


def stop(hub: UsageHub, user: str) -> None:
    hub.api("DELETE", f"/users/{user}/server")
    hub.wait_stopped(user)


@pytest.fixture(params=["sqlite", "postgresql"])
def hub(request):
    db_url = None
    if request.param == "postgresql":
        db_url = request.getfixturevalue("postgres").create_database("hub_e2e")
    h = UsageHub(db_url)
    try:
        h.start()
        yield h
    finally:
        h.stop()


def test_budget_refuses_keeps_usage_across_restarts_and_comes_back(hub):
    pool = whole_gpu_pool(hub)

    # a server runs past its budget: 0.01 GPU-hours is 36 s of one GPU; a minute passes
    assert spawn(hub, "ada", pool).status_code in (201, 202)
    hub.wait_ready("ada")
    hub.move_clock(60)
    # ada's home page shows her running server's cost so far (JupyterHub's page, extended)
    page = hub.login("ada").get(f"{hub.url}/hub/home", timeout=30)
    assert page.status_code == 200 and 'id="gpuspawner-gpu-hours"' in page.text
    shown = page.text[page.text.index('id="gpuspawner-gpu-hours"'):][:1500]
    assert "You have 0 of your 0.01 GPU-hours left in the last hour" in shown, shown
    # the pool as users read it (its spawn-page name), never its raw id
    shown_name = next(p["display_name"] for p in hub.gpus()["pools"] if p["id"] == pool)
    assert shown_name in shown and pool not in shown and "GPU-hours</td>" in page.text
    running = hub.gpu_hours("ada")
    assert running["budget"] == 0.01 and running["remaining"] == 0.0 and running["gpu_hours"] > 0.01
    [server] = running["servers"]  # still running: nothing stops it but the culler
    assert server["pool"] == pool and server["stops_at"] is not None
    assert "Your GPU-hour budget runs out on" in page.text  # the home page warned
    # the culler stops it for its spent budget, busy or not
    done = hub.culler("--once")
    assert done.returncode == 0, done.stderr
    assert "cull ada/ (" in done.stderr and "[budget]" in done.stderr, done.stderr
    hub.wait_stopped("ada")
    used = hub.gpu_hours("ada")
    # a minute on the moved clock, and the real seconds the start and stop took
    assert used["servers"] == [] and 0.0166 <= used["gpu_hours"] <= 0.06

    # the next spawn is refused with 403 and the time GPU-hours come back
    r = spawn(hub, "ada", pool)
    assert r.status_code == 403, r.text
    message = r.json()["message"]
    assert re.match(r"You have used 0\.0\d+ of your 0\.01 GPU-hours in the last hour; "
                    r"0\.0[0-9]+ GPU-hours come back on \d+ \w+ at \d\d:\d\d UTC\.$", message), message
    retry = datetime.fromisoformat(hub.gpu_hours("ada")["retry_at"].replace("Z", "+00:00"))
    assert timedelta(minutes=58) <= retry - hub.hub_now() <= timedelta(minutes=61)
    assert not hub.pods("jupyterhub")  # nothing was created
    # the spawn page says so before she tries, with each pool's hourly rate for the chosen count
    page = hub.login("ada").get(f"{hub.url}/hub/spawn/ada", timeout=30)
    assert page.status_code == 200 and "You have 0 of your 0.01 GPU-hours left in the last hour; " in page.text
    assert f'"{pool}": 1.0' in page.text  # gs-gpu-hour-rates: weighted GPU-hours per hour of one GPU

    # a restarted hub keeps the books
    hub.stop_hub()
    hub.start_hub()
    assert hub.gpu_hours("ada")["gpu_hours"] == used["gpu_hours"]
    assert spawn(hub, "ada", pool).status_code == 403

    # a crash while a server runs, and its pod deleted while the hub is down: closed once, from the cluster
    assert spawn(hub, "bob", pool).status_code in (201, 202)
    hub.wait_ready("bob")
    hub.move_clock(120)
    hub.stop_hub(crash=True)
    hub.delete_pod("bob")
    hub.start_hub()
    wait_for(lambda: hub.gpu_hours("bob")["servers"] == [], 60, "bob's holding to be closed")
    bob = hub.gpu_hours("bob")["gpu_hours"]
    assert 120 / 3600 <= bob <= 0.2  # two minutes, and the seconds the hub took to come back
    assert hub.gpu_hours("bob")["gpu_hours"] == bob  # the next sweeps do not count it again

    # a pod deleted behind the running hub's back: the hub's poll notices, the holding is closed
    assert spawn(hub, "cy", pool).status_code in (201, 202)  # a fresh 0.01 GPU-hours
    hub.wait_ready("cy")
    hub.delete_pod("cy")
    hub.wait_stopped("cy")
    wait_for(lambda: hub.gpu_hours("cy")["servers"] == [], 60, "cy's holding to be closed")

    # the window moves on: ada's GPU-hours are back and she may start again
    hub.move_clock(3600 + 120)
    back = hub.gpu_hours("ada")
    assert back["gpu_hours"] == 0.0 and back["retry_at"] is None
    assert spawn(hub, "ada", pool).status_code in (201, 202)
    hub.wait_ready("ada")
    stop(hub, "ada")
    # the books: every holding closed, each once (bob's count did not move since it was closed)
    assert all(hub.gpu_hours(u)["servers"] == [] for u in ("ada", "bob", "cy"))
    assert hub.gpu_hours("bob")["gpu_hours"] == 0.0  # its hour has left the window too
