"""Every watch of the Kubernetes API stalled while lists still answer, with spawns and cancels, under
a real hub (``gpuspawner demo``).

    python -m scripts.faults.stalled_watch                  # 8 spawns cancelled, a 75 s window
    python -m scripts.faults.stalled_watch --spawns 16 --window 90

Through the fault proxy in front of Kubernetes' own API server, every watch request hangs while lists
and writes answer; the open watches are cut at the start.  The hub's capacity
window (``gpu_capacity_stall_timeout``) is shortened to ``--window`` seconds and its orphan sweep
(``gpu_orphan_pod_interval``, ``gpu_orphan_pod_grace``) to seconds.  Checked:

* GPU spawns sent at once are admitted (the figures are still within the window) and cancelled
  with ``DELETE /hub/api/users/<name>/server`` while pending: none leaves a pod behind, although
  KubeSpawner's pod watch never shows the pods;
* ``GET /hub/api/gpus`` says ``"healthy": false`` within the window plus a few seconds of the stall
  (watched from the stall on, while the spawns are sent and cancelled), and stays
  so while the watches stall, re-lists notwithstanding; every GPU spawn meanwhile gets the 503 of
  an outage and creates no pod;
* a server pod that no server of the hub owns (one created behind the hub's back, as a hub that
  restarted would have left) is deleted by the hub's sweep, and counted on ``/hub/metrics``;
* once watches answer again: healthy again, the counts equal a recount of the cluster from
  scratch (``recount.py``), and no pod of the hub's servers is owned by no server.

Exit status 0 when all held, 1 otherwise.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import re
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import requests  # noqa: E402

from gpuspawner.capacity.config import CapacityConfig  # noqa: E402
from scripts.faults import concurrent_spawns, scenario  # noqa: E402
from scripts.faults.recount import differences, from_api, recount  # noqa: E402
from tests.e2e.harness import DemoHub, wait_for  # noqa: E402

NAMESPACE = "jupyterhub"
SERVER_PODS = "component=singleuser-server"
STRAY_USER = "nobody-owns-this"
# kube-apiserver sends a quiet watch a bookmark about once a minute (bookmarkFrequency in
# k8s.io/apiserver/pkg/storage/cacher/cacher.go), so a window under that would see healthy watches
# of a quiet cluster as stalled
WINDOW = 75.0


def config(window: float) -> str:
    """The demo's extra config: servers that start fast, the short window, a sweep every 2 s."""
    return concurrent_spawns.SERVER_CONFIG + f"""
c.GPUSpawner.gpu_capacity_stall_timeout = {window}
c.GPUSpawner.gpu_orphan_pod_interval = 2
c.GPUSpawner.gpu_orphan_pod_grace = 3
"""


@dataclass
class Report(scenario.Report):
    spawns: int = 0
    admitted: int = 0
    cancelled: int = 0
    unhealthy_after_s: float = 0.0
    refused: int = 0
    relists: int = 0
    reaped: int = 0
    recovery_s: float = 0.0

    def summary(self) -> str:
        return (f"watches stalled, lists answering: {self.admitted} of {self.spawns} spawns admitted and "
                f"{self.cancelled} cancelled while pending; unhealthy {self.unhealthy_after_s:.1f} s after the "
                f"stall; {self.refused} GPU spawns refused with 503 across {self.relists} re-lists; "
                f"{self.reaped} orphaned pod(s) deleted; healthy again {self.recovery_s:.1f} s after the watches "
                "answered: " + self.outcome("all checks held"))


def _faults(hub: DemoHub, method: str, path: str, **body) -> dict:
    r = requests.request(method, f"{hub.faults_url}/{path}", json=body or None, timeout=10)
    r.raise_for_status()
    return r.json()


def _lists(hub: DemoHub) -> int:
    return sum(c["count"] for c in _faults(hub, "GET", "counters")["counts"] if c["verb"] == "list")


def _spawn(hub: DemoHub, user: str, pool: dict) -> tuple[str, int, str]:
    r = hub.api("POST", f"/users/{user}/server", json={"profile": "gpu", "gpu_pool": pool["id"], "gpus": 1})
    try:
        message = r.json().get("message", "")
    except ValueError:
        message = r.text
    return user, r.status_code, message


def _stray_pod(hub: DemoHub) -> None:
    """A server pod with KubeSpawner's labels and annotations for a user the hub has no server of."""
    pod = {
        "metadata": {
            "name": f"jupyter-{STRAY_USER}",
            "labels": {"app": "jupyterhub", "heritage": "jupyterhub", "app.kubernetes.io/name": "jupyterhub",
                       "app.kubernetes.io/managed-by": "kubespawner", "component": "singleuser-server",
                       "app.kubernetes.io/component": "singleuser-server",
                       "hub.jupyter.org/username": STRAY_USER},
            "annotations": {"hub.jupyter.org/username": STRAY_USER},
        },
        "spec": {"containers": [{"name": "notebook", "image": "quay.io/jupyter/base-notebook:latest",
                                 "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }
    r = hub.k8s.post(f"{hub.k8s_url}/api/v1/namespaces/{NAMESPACE}/pods", json=pod, timeout=10)
    r.raise_for_status()


def unowned_pods(hub: DemoHub) -> list[str]:
    """Server pods (not being deleted) whose user has no server of that name in the hub."""
    found = []
    for p in hub.pods(NAMESPACE, labelSelector=SERVER_PODS):
        meta = p["metadata"]
        if meta.get("deletionTimestamp"):
            continue
        user = (meta.get("annotations") or {}).get("hub.jupyter.org/username")
        name = (meta.get("annotations") or {}).get("hub.jupyter.org/servername", "")
        r = hub.api("GET", f"/users/{user}")
        servers = r.json().get("servers", {}) if r.status_code == 200 else {}
        if name not in servers:
            found.append(f"{meta['name']} (user {user!r}, phase {p['status'].get('phase')})")
    return found


def _reaped(hub: DemoHub) -> int:
    r = requests.get(f"{hub.url}/hub/metrics", headers={"Authorization": f"token {hub.token}"}, timeout=30)
    m = re.search(r"^gpuspawner_orphan_pods_deleted_total ([0-9.e+]+)$", r.text, re.M)
    return int(float(m.group(1))) if m else 0


def run(hub: DemoHub, spawns: int = 8, window: float = WINDOW, hold: float | None = None) -> Report:
    """The scenario under ``hub``; once unhealthy, it must stay so for ``hold`` seconds (two windows)."""
    report = Report(spawns=spawns)
    names = [f"stall{i:02d}" for i in range(spawns)]
    r = hub.api("POST", "/users", json={"usernames": names + ["stall-late"]})
    assert r.status_code in (201, 409), r.text
    pool = concurrent_spawns.pick_pool(hub, 10**6)
    _faults(hub, "POST", "faults/close-watches")
    wait_for(lambda: hub.gpus()["healthy"], 60, "live figures")
    time.sleep(1.5)  # a watch cut within a second of its start counts as a failure
    _faults(hub, "POST", "faults/stall", seconds=3600, verb="watch")  # every watch hangs; lists answer
    _faults(hub, "POST", "faults/close-watches")
    stalled = time.monotonic()
    watch = _FirstUnhealthy(hub, stalled)
    watch.start()
    try:
        _while_stalled(hub, names, pool, window, 2 * window if hold is None else hold, watch, report)
    finally:
        watch.stop.set()
        _faults(hub, "DELETE", "faults")
        _faults(hub, "POST", "faults/close-watches")
    back = time.monotonic()
    wait_for(lambda: hub.gpus()["healthy"], 3 * window + 60, "GET /hub/api/gpus to be healthy again")
    report.recovery_s = time.monotonic() - back
    try:
        wait_for(lambda: not unowned_pods(hub), 60, "no server pod without a server")
    except AssertionError:
        report.problems.append("server pods no server owns: " + "; ".join(unowned_pods(hub)))
    report.reaped = _reaped(hub)
    if report.reaped < 1:
        report.problems.append("the hub's sweep deleted no orphaned pod (the stray one was left)")
    expected = recount(hub.kube("/api/v1/nodes")["items"], hub.pods(), CapacityConfig())
    diff = differences(expected, from_api(hub.gpus()["pools"]))
    if diff:
        report.problems.append("after the stall the counts differ from a recount:\n  " + "\n  ".join(diff))
    return report


class _FirstUnhealthy(threading.Thread):
    """Polls ``GET /hub/api/gpus`` from the stall on: ``after_s``, when it first said unhealthy (seconds
    after ``since``), whatever the scenario does meanwhile."""

    def __init__(self, hub: DemoHub, since: float) -> None:
        super().__init__(daemon=True)
        self.hub, self.since = hub, since
        self.after_s: float | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                if self.hub.gpus()["healthy"] is False:
                    self.after_s = time.monotonic() - self.since
                    return
            except (requests.RequestException, ValueError, KeyError):
                pass
            self.stop.wait(0.5)


def _while_stalled(hub: DemoHub, names: list[str], pool: dict, window: float, hold: float,
                   watch: _FirstUnhealthy, report: Report) -> None:
    # within the window: spawns are admitted on the figures of a moment ago, and cancelled while pending
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(names)) as ex:
        answers = list(ex.map(lambda u: _spawn(hub, u, pool), names))
    admitted = [u for u, code, _ in answers if code in (201, 202)]
    report.admitted = len(admitted)
    time.sleep(2)  # their pods are created meanwhile; KubeSpawner's stalled pod watch shows none
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(admitted))) as ex:
        codes = list(ex.map(lambda u: hub.api("DELETE", f"/users/{u}/server").status_code, admitted))
    report.cancelled = sum(1 for c in codes if c in (202, 204))
    for user in admitted:
        try:
            hub.wait_stopped(user, timeout=60)
        except AssertionError as e:
            report.problems.append(str(e))
    _stray_pod(hub)
    # past the window: unhealthy, and it stays so while re-lists answer; spawns get the outage's 503
    try:
        wait_for(lambda: watch.after_s is not None, max(1.0, watch.since + window + 15 - time.monotonic()),
                 "the stall to be noticed")
    except AssertionError as e:
        report.problems.append(f"{e} ({time.monotonic() - watch.since:.0f} s after the stall)")
        return
    report.unhealthy_after_s = watch.after_s
    lists = _lists(hub)
    end = time.monotonic() + hold
    while time.monotonic() < end:
        gpus = hub.gpus()
        if gpus["healthy"] is not False:
            report.problems.append(f"healthy again while the watches stall: {gpus.get('error')!r}")
            break
        user, code, message = _spawn(hub, "stall-late", pool)
        if code != 503 or not message.startswith("GPU capacity is unknown: "):
            report.problems.append(f"a GPU spawn while the watches stall got {code}: {message[:300]}")
            if code in (201, 202):
                hub.api("DELETE", "/users/stall-late/server")
                hub.wait_stopped("stall-late", timeout=60)
        else:
            report.refused += 1
        time.sleep(2)
    report.relists = _lists(hub) - lists
    if hub.pods(NAMESPACE, labelSelector="hub.jupyter.org/username=stall-late"):
        report.problems.append("a pod was created for a spawn refused while the watches stalled")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spawns", type=int, default=8, help="GPU spawns admitted, then cancelled (default 8)")
    parser.add_argument("--window", type=float, default=WINDOW,
                        help=f"the hub's gpu_capacity_stall_timeout in seconds (default {WINDOW:g}, past "
                             "kube-apiserver's bookmark minute)")
    args = parser.parse_args(argv)
    return scenario.finish(scenario.run_under_hub(lambda hub: run(hub, args.spawns, args.window),
                                                  config(args.window)))


if __name__ == "__main__":
    sys.exit(main())
