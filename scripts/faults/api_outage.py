"""The Kubernetes API server unreachable for minutes, then back, under a real hub (``gpuspawner demo``).

    python -m scripts.faults.api_outage                 # a 5-minute outage
    python -m scripts.faults.api_outage --outage 20     # a short one

While the API server (Kubernetes' own, behind the fault proxy) is away, new connections to it are refused
and every request on a connection the hub kept open is answered ``503 Service Unavailable`` (what a load
balancer in front of a control plane that is down answers), through the fault proxy's control endpoint.
The hub's watches are cut at the start.  Meanwhile the cluster changes (another team's GPU pod is
deleted).  Checked, every few seconds and at the end:

* the hub never crashes: its process runs and ``GET /hub/api/`` answers;
* the spawn page answers within 1 s and says GPU capacity is unknown and how old the last figures
  are;
* ``GET /hub/api/gpus`` says ``"healthy": false`` with a plain-language ``error``;
* a GPU spawn is refused with a 503 that says capacity is unknown (the default
  ``gpu_admit_without_capacity = False``), and creates no pod;
* once the server is back, ``GET /hub/api/gpus`` is healthy again, its DRA pools are back within
  5 s of that, its counts equal a recount of the cluster from scratch (``recount.py``), and a GPU
  server starts.

Exit status 0 when all held, 1 otherwise.
"""

from __future__ import annotations

import argparse
import html
import sys
import time
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import requests  # noqa: E402

from gpuspawner.capacity.config import CapacityConfig  # noqa: E402
from scripts.faults import scenario  # noqa: E402
from scripts.faults.recount import differences, from_api, recount  # noqa: E402
from tests.e2e.harness import DemoHub, wait_for  # noqa: E402

USER = "outage-user"
PAGE_LIMIT_S = 1.0
DRA_LAG_LIMIT_S = 5.0  # the DRA pools may come back this much later than the device-plugin pools
# every verb the hub's clients use, except delete, which this script uses to change the cluster
FAILING_VERBS = ("get", "list", "watch", "create", "update", "patch")


@dataclass
class Report(scenario.Report):
    outage_s: float = 0.0
    polls: int = 0
    slowest_page_s: float = 0.0
    refusals: int = 0
    recovery_s: float = 0.0
    dra_pools: int = 0
    dra_recovery_s: float = 0.0

    def summary(self) -> str:
        dra = f", its {self.dra_pools} DRA pools {self.dra_recovery_s:.1f} s after" if self.dra_pools else ""
        return (f"{self.outage_s:.0f} s outage: {self.polls} polls, slowest spawn page {self.slowest_page_s * 1000:.0f} ms, "
                f"{self.refusals} GPU spawns refused with 503, live again {self.recovery_s:.1f} s after the server came "
                f"back{dra}: " + self.outcome("all checks held"))


def _faults(hub: DemoHub, method: str, path: str, **body) -> dict:
    r = hub.k8s.request(method, f"{hub.faults_url}/{path}", json=body or None, timeout=10)
    r.raise_for_status()
    return r.json()


def _go_away(hub: DemoHub, seconds: float) -> None:
    """Refuse new connections for ``seconds``, fail requests on open ones, cut the watches."""
    _faults(hub, "POST", "faults/refuse", refuse=True, seconds=seconds)
    for verb in FAILING_VERBS:
        _faults(hub, "POST", "faults/fail", count=10**9, code=503, verb=verb)
    _faults(hub, "POST", "faults/close-watches")


def _dra_pools(hub: DemoHub) -> set[str]:
    return {p["id"] for p in hub.gpus()["pools"] if p.get("allocation") == "dra"}


def _a_gpu_pod_of_another_team(hub: DemoHub) -> dict | None:
    for p in hub.pods():
        if p["metadata"]["namespace"] != "jupyterhub" and any(
            "/" in k for c in p["spec"]["containers"] for k in (c.get("resources", {}).get("limits") or {})
        ):
            return p
    return None


def _gpu_pool(hub: DemoHub) -> dict:
    for p in sorted(hub.gpus()["pools"], key=lambda p: -p["free"]):
        if p["resource"] == "nvidia.com/gpu" and p["free"] and (p["cuda_version"] or "0").split(".")[0] >= "12":
            return p
    raise AssertionError(f"no NVIDIA pool with free GPUs and a CUDA 12 driver: {hub.gpus()}")


def _check_during(hub: DemoHub, page: requests.Session, pool: dict, report: Report) -> None:
    """One round of checks while the server is away."""
    if hub.proc.poll() is not None:
        report.problems.append(f"the demo (hub) exited with {hub.proc.returncode}")
        return
    began = time.perf_counter()
    r = page.get(f"{hub.url}/hub/spawn", timeout=30)
    took = time.perf_counter() - began
    report.slowest_page_s = max(report.slowest_page_s, took)
    text = html.unescape(r.text)
    if r.status_code != 200 or took > PAGE_LIMIT_S:
        report.problems.append(f"the spawn page answered {r.status_code} in {took:.2f} s")
    elif "GPU capacity is unknown" not in text or "the last figures are " not in text:
        report.problems.append("the spawn page does not say that GPU capacity is unknown and how old the figures are")
    gpus = hub.gpus()
    if gpus.get("healthy") is not False or not gpus.get("error"):
        report.problems.append(f"GET /hub/api/gpus does not say the figures are stale: healthy={gpus.get('healthy')}, "
                               f"error={gpus.get('error')!r}")
    r = hub.api("POST", f"/users/{USER}/server", json={"profile": "gpu", "gpu_pool": pool["id"], "gpus": 1})
    message = r.json().get("message", "") if r.headers.get("Content-Type", "").startswith("application/json") else r.text
    if r.status_code != 503 or not message.startswith("GPU capacity is unknown: "):
        report.problems.append(f"a GPU spawn during the outage got {r.status_code}: {message[:300]}")
    else:
        report.refusals += 1
    report.polls += 1


def run(hub: DemoHub, outage: float = 300.0, poll: float = 5.0) -> Report:
    """Take the API server away for ``outage`` seconds under ``hub``, then back; see the module doc."""
    report = Report(outage_s=outage)
    hub.create_user(USER)
    page = hub.login(USER)
    pool = _gpu_pool(hub)
    victim = _a_gpu_pod_of_another_team(hub)
    dra_before = _dra_pools(hub)
    report.dra_pools = len(dra_before)
    # the fault proxy's control endpoint is a port of its own: it answers while the proxy refuses
    _faults(hub, "GET", "faults")
    began = time.monotonic()
    _go_away(hub, outage)
    if victim is not None:  # the cluster changes while the hub cannot see it
        meta = victim["metadata"]
        hub.k8s.delete(f"{hub.k8s_url}/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                   params={"gracePeriodSeconds": 0}, timeout=10).raise_for_status()
    try:
        wait_for(lambda: hub.gpus().get("healthy") is False, min(30.0, outage), "the hub to notice the outage")
        while time.monotonic() - began < outage - poll:
            _check_during(hub, page, pool, report)
            time.sleep(poll)
    finally:
        time.sleep(max(0.0, outage + 0.5 - (time.monotonic() - began)))  # the refusal window runs out ...
        hub.k8s.close()
        wait_for(lambda: hub.k8s.delete(f"{hub.faults_url}/faults", timeout=10).ok, 30,
                 "the API server to take connections again")  # ... and the 503s end
    back = time.monotonic()
    wait_for(lambda: hub.gpus().get("healthy") is True, 120, "GET /hub/api/gpus to be healthy again")
    report.recovery_s = time.monotonic() - back
    if dra_before:  # DRA pools come back as fast as the device-plugin ones (their informers too)
        wait_for(lambda: dra_before <= _dra_pools(hub), 120, "the DRA pools to be back")
        report.dra_recovery_s = time.monotonic() - back
        if report.dra_recovery_s > report.recovery_s + DRA_LAG_LIMIT_S:
            report.problems.append(f"the DRA pools came back {report.dra_recovery_s - report.recovery_s:.1f} s after "
                                   "the device-plugin pools")
    if hub.pods("jupyterhub", labelSelector=f"hub.jupyter.org/username={USER}"):
        report.problems.append("a pod was created for a spawn refused during the outage")
    expected = recount(hub.kube("/api/v1/nodes")["items"], hub.pods(), CapacityConfig())
    diff = differences(expected, from_api(hub.gpus()["pools"]))
    if diff:
        report.problems.append("after the outage the counts differ from a recount:\n  " + "\n  ".join(diff))
    _spawn_after(hub, pool, report)
    return report


def _spawn_after(hub: DemoHub, pool: dict, report: Report) -> None:
    r = hub.api("POST", f"/users/{USER}/server", json={"profile": "gpu", "gpu_pool": pool["id"], "gpus": 1})
    if r.status_code not in (201, 202):
        report.problems.append(f"a GPU spawn after the outage got {r.status_code}: {r.text[:300]}")
        return
    try:
        hub.wait_ready(USER, timeout=120)
    except AssertionError as e:
        report.problems.append(f"a GPU server did not start after the outage: {str(e)[:500]}")
    hub.api("DELETE", f"/users/{USER}/server")
    wait_for(lambda: not hub.server(USER), 90, "the server to stop")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--outage", type=float, default=300.0, help="seconds the API server is away (default 300)")
    parser.add_argument("--poll", type=float, default=5.0, help="seconds between two rounds of checks")
    args = parser.parse_args(argv)
    return scenario.finish(scenario.run_under_hub(lambda hub: run(hub, args.outage, args.poll)))


if __name__ == "__main__":
    sys.exit(main())
