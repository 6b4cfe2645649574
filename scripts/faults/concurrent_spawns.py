"""Many users ask for one GPU each at the same moment, against a pool with fewer free GPUs.

    python -m scripts.faults.concurrent_spawns              # 64 users
    python -m scripts.faults.concurrent_spawns --users 16

Runs ``gpuspawner demo`` with servers that print their ``NVIDIA_VISIBLE_DEVICES`` and serve HTTP
(``SERVER_CONFIG``: no Jupyter server per pod, so 64 spawns fit on a small machine), picks the
NVIDIA pool with the most free GPUs (N, fewer than the users), and sends every user's
``POST /hub/api/users/<name>/server {"profile": "gpu", "gpu_pool": <pool>, "gpus": 1}`` at once.
Checked:

* at most N are admitted; every other answer is a 400 that says the pool has no GPU left, and no
  answer is a 5xx;
* the admitted servers start; no node holds more GPUs than it has (all namespaces counted), and no
  device id is given to two servers (read from the servers' logs through ``pods/log``);
* once they stop, the pool's free count is N again.

Exit status 0 when all held, 1 otherwise.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from gpuspawner.capacity.quantity import parse_count  # noqa: E402
from scripts.faults import scenario  # noqa: E402
from tests.e2e.harness import DemoHub, wait_for  # noqa: E402

# servers that say which devices they got and answer HTTP, instead of a Jupyter server per pod
SERVER_CONFIG = """
c.GPUSpawner.cmd = ["sh", "-c", 'echo "NVIDIA_VISIBLE_DEVICES=${NVIDIA_VISIBLE_DEVICES:-}"; '
                    'exec python -m http.server --bind 0.0.0.0 8888', "gpuspawner-fault-server"]
c.GPUSpawner.args = []
"""
_DEVICES = re.compile(r"^NVIDIA_VISIBLE_DEVICES=(.*)$", re.M)


@dataclass
class Report(scenario.Report):
    users: int = 0
    free_before: int = 0
    admitted: int = 0
    refused: int = 0
    seconds: float = 0.0

    def summary(self) -> str:
        return (f"{self.users} concurrent spawns against {self.free_before} free GPUs: {self.admitted} admitted, "
                f"{self.refused} refused, in {self.seconds:.1f} s: "
                + self.outcome("all checks held"))


def pick_pool(hub: DemoHub, users: int) -> dict:
    """The NVIDIA pool (whole GPUs, a CUDA 12 driver for the demo's default image) with the most
    free GPUs, fewer than ``users``."""
    pools = [p for p in hub.gpus()["pools"]
             if p["resource"] == "nvidia.com/gpu" and 0 < p["free"] < users and p["max_free_per_node"] >= 1
             and (p["cuda_version"] or "0").split(".")[0] >= "12"]
    if not pools:
        raise AssertionError(f"no NVIDIA pool with between 1 and {users - 1} free GPUs: {hub.gpus()['pools']}")
    return max(pools, key=lambda p: p["free"])


def gpu_requests(pod: dict) -> dict[str, int]:
    """GPU requests of a pod as the scheduler counts them (app containers summed, the largest init
    container, requests else limits); only extended resources with a '/'."""
    def of(c: dict) -> dict[str, int]:
        res = c.get("resources") or {}
        merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        return {k: parse_count(v, round_up=True) for k, v in merged.items() if "/" in k}

    total: dict[str, int] = {}
    for c in pod["spec"].get("containers", []):
        for k, v in of(c).items():
            total[k] = total.get(k, 0) + v
    for c in pod["spec"].get("initContainers", []) or []:
        for k, v in of(c).items():
            total[k] = max(total.get(k, 0), v)
    return total


def overcommitted(hub: DemoHub) -> list[str]:
    """Nodes whose bound, non-terminal pods (all namespaces) ask for more of a GPU resource than it has."""
    held: dict[tuple[str, str], int] = {}
    for p in hub.pods():
        node = p["spec"].get("nodeName")
        if not node or p.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            continue
        for r, n in gpu_requests(p).items():
            held[(node, r)] = held.get((node, r), 0) + n
    nodes = hub.nodes()
    lines = []
    for (node, r), n in sorted(held.items()):
        alloc = parse_count((nodes.get(node, {}).get("status", {}).get("allocatable") or {}).get(r, "0"))
        if n > alloc:
            lines.append(f"node {node} holds {n} x {r} but has {alloc}")
    return lines


def devices_of(hub: DemoHub, pod: dict) -> list[str]:
    """The device ids the server's container got, from the line it printed first."""
    meta = pod["metadata"]
    r = hub.kube_text(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/log")
    m = _DEVICES.search(r)
    return [d for d in (m.group(1).split(",") if m else []) if d]


def _spawn(hub: DemoHub, user: str, pool: dict) -> tuple[str, int, str]:
    r = hub.api("POST", f"/users/{user}/server", json={"profile": "gpu", "gpu_pool": pool["id"], "gpus": 1})
    try:
        message = r.json().get("message", "")
    except ValueError:
        message = r.text
    return user, r.status_code, message


def run(hub: DemoHub, users: int = 64) -> Report:
    report = Report(users=users)
    names = [f"burst{i:02d}" for i in range(users)]
    r = hub.api("POST", "/users", json={"usernames": names})
    assert r.status_code in (201, 409), r.text
    pool = pick_pool(hub, users)
    report.free_before = n = pool["free"]
    began = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=users) as ex:
        answers = list(ex.map(lambda u: _spawn(hub, u, pool), names))
    report.seconds = time.perf_counter() - began
    admitted = [u for u, code, _ in answers if code in (201, 202)]
    report.admitted = len(admitted)
    for user, code, message in answers:
        if code in (201, 202):
            continue
        if code == 400 and (f"{pool['display_name']} cannot give any GPU now" in message
                            or "choose between 1 and" in message):
            report.refused += 1
        else:
            report.problems.append(f"{user}: {code} {message[:200]}")
    if len(admitted) > n:
        report.problems.append(f"{len(admitted)} spawns were admitted for {n} free GPUs")
    try:
        for user in admitted:
            hub.wait_ready(user, timeout=180)
        report.problems += overcommitted(hub)
        seen: dict[str, str] = {}
        for user in admitted:
            pods = hub.pods("jupyterhub", labelSelector=f"hub.jupyter.org/username={user}")
            ids = devices_of(hub, pods[0]) if pods else []
            if len(ids) != 1:
                report.problems.append(f"{user}'s server sees devices {ids}, not one GPU")
            for d in ids:
                if d in seen:
                    report.problems.append(f"device {d} was given to {seen[d]} and to {user}")
                seen[d] = user
    finally:
        for user in admitted:
            hub.api("DELETE", f"/users/{user}/server")
        for user in admitted:
            hub.wait_stopped(user, timeout=120)
    try:
        wait_for(lambda: hub.pool(pool["id"])["free"] == n, 60, f"pool {pool['id']} to have {n} free GPUs again")
    except AssertionError as e:
        report.problems.append(str(e))
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=64)
    args = parser.parse_args(argv)
    return scenario.finish(scenario.run_under_hub(lambda hub: run(hub, args.users), SERVER_CONFIG))


if __name__ == "__main__":
    sys.exit(main())
