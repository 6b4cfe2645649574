"""Generated hostile bodies for ``POST /hub/api/users/<name>/server``, through a real hub.

    python -m scripts.faults.hostile_bodies                  # 10,000 bodies
    python -m scripts.faults.hostile_bodies --bodies 1000 --seed 2

Runs ``gpuspawner demo`` (with ``HOSTILE_CONFIG``: one GPU pool only a group may use) and sends
bodies made by a seeded generator: counts of the wrong type, fractions, huge and negative numbers,
strings with spaces or exponents; pool ids that are unknown, of the wrong type, or of a pool only
another group may use; unknown profiles and profiles of the wrong type; unknown option names,
Kubernetes-looking ones (``securityContext``, ``node_selector``, ``tolerations`` ...) and nested
objects; bodies larger than the user-options limit; JSON that is not an object; bodies that are
not JSON at all.  Each body carries at least one thing no profile accepts.  Checked:

* every answer is a 4xx whose JSON ``message`` names what is wrong (one of the words the
  generator expects for what it put in), never a 5xx;
* no pod is created for any of these users;
* the hub still answers afterwards (``GET /hub/api/``, ``GET /hub/api/gpus``).

Exit status 0 when all held, 1 otherwise.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import requests  # noqa: E402

from scripts.faults import scenario  # noqa: E402
from tests.e2e.harness import DemoHub  # noqa: E402

RESTRICTED_GROUP = "mig-team"
# one pool only RESTRICTED_GROUP may use: "other users' pools" for everyone else
HOSTILE_CONFIG = f"""
c.GPUSpawner.gpu_pool_rules = [{{"match": "*:nvidia.com/mig-*", "allowed_groups": [{RESTRICTED_GROUP!r}]}}]
"""
WORKERS = 4

BAD_COUNTS = ["", None, 1.0, 2.0, 0.5, "2e0", "\t1", " 1", "1 ", "+1", "-1", -1, 0, "0", True, False, [1], {"n": 1},
              "1.5", 1.5, 10**30, -(10**30), 2**63, "99999999999", "٣", "0x2", "two", "1; rm -rf /", "NaN"]
BAD_PROFILES = [7, ["gpu"], {"slug": "gpu"}, True, "nope", "GPU", "gpu ", "gpu\u0000", "x" * 300, "../cpu", "<b>cpu</b>"]
BAD_POOLS = [None, "", 7, ["x"], {"id": "x"}, True, "no-such:pool:nvidia.com/gpu", "../../etc/passwd", "x" * 300,
             "<script>alert(1)</script>", "*"]
STEERING_KEYS = ["securityContext", "node_selector", "nodeSelector", "tolerations", "affinity", "cpu_limit",
                 "mem_limit", "extra_pod_config", "extra_container_config", "namespace", "service_account",
                 "privileged", "volumes", "env", "cmd", "args", "resources", "extra_resource_limits",
                 "kubespawner_override", "start_timeout", "uid", "fs_gid"]
NESTED = [{"privileged": True}, {"runAsUser": 0}, [{"operator": "Exists"}], {"a": {"b": {"c": [1, {"d": None}]}}}]
# JSON that is not an object.  Falsy values (false, 0, "", [], null) are not among them: JupyterHub
# reads them as "no options" (jupyterhub/apihandlers/users.py ``get_server_json_body``), as it does
# an empty body, and starts the default server with the options saved last.
NOT_OBJECTS = ["[1, 2]", '"gpu"', "1", "1.5", "true", "1e999", '[{"profile": "gpu"}]',
               '{"user_options": [1]}', '{"user_options": "gpu"}']
NOT_JSON = [b"not json", b"{", b"{'profile': 'gpu'}", b"profile=gpu&gpus=1", b"<xml/>", b"\xff\xfe\x00",
            b'{"profile": "gpu",}', b'{"profile": "gpu" "gpus": 1}', b"[" * 5000 + b"]" * 5000]


@dataclass(frozen=True)
class Body:
    data: bytes
    words: tuple[str, ...]  # the message must contain one of these (case-insensitive)
    kind: str


class Generator:
    """Seeded hostile bodies; ``pools`` are real pool ids (so that a poisoned body is otherwise fine)."""

    def __init__(self, seed: int, pools: list[str], restricted: list[str]) -> None:
        self.rnd = random.Random(seed)
        self.pools = pools or ["x:y:nvidia.com/gpu"]
        self.restricted = restricted

    def base(self) -> dict:
        r = self.rnd.random()
        if r < 0.5:
            return {"profile": "gpu", "gpu_pool": self.rnd.choice(self.pools), "gpus": 1}
        if r < 0.7:
            return {"profile": "cpu"}
        return {}

    def poison(self, body: dict) -> tuple[str, str]:
        """Spoil ``body`` in one way; returns the kind and a word the refusal must contain."""
        r = self.rnd
        kind = r.choice(["count", "count", "pool", "profile", "key", "steering", "nested", "restricted"])
        if kind == "count":
            body.setdefault("profile", "gpu")
            body["gpus"] = r.choice(BAD_COUNTS)
            return kind, "gpu"
        if kind == "pool":
            body.setdefault("profile", "gpu")
            body["gpu_pool"] = r.choice(BAD_POOLS)
            return kind, "pool"
        if kind == "restricted" and self.restricted:
            body.update(profile="gpu", gpu_pool=r.choice(self.restricted))
            return kind, "pool"
        if kind == "profile":
            body["profile"] = r.choice(BAD_PROFILES)
            return kind, "profile"
        if kind == "steering":
            key = r.choice(STEERING_KEYS)
            body[key] = r.choice([True, "x", 0, *NESTED])
            return kind, f"`{key}`"
        key = f"x-{r.randrange(16**6):06x}" if kind == "key" else r.choice(["spec", "metadata", "options", "gpu"])
        body[key] = r.choice(NESTED) if kind == "nested" else r.choice(["", 1, None, [], "a" * 50])
        return kind, f"`{key}`"

    def next(self) -> Body:
        r = self.rnd.random()
        if r < 0.05:
            text = self.rnd.choice(NOT_OBJECTS)
            return Body(text.encode(), ("json object", "must be an object"), "not-an-object")
        if r < 0.10:
            return Body(self.rnd.choice(NOT_JSON), ("json",), "not-json")
        if r < 0.12:
            size = self.rnd.choice([9_000, 100_000, 100_000, 1_000_000])
            body = {"profile": "cpu", "note": "x" * size}
            # over the options' limit (400), or over the request body's (413, before it is read)
            return Body(json.dumps(body).encode(), ("bytes as json", "request body may be at most"), "too-large")
        body = self.base()
        words, kinds = [], []
        for _ in range(self.rnd.choice([1, 1, 1, 2, 3])):
            kind, word = self.poison(body)
            kinds.append(kind)
            words.append(word)
        if self.rnd.random() < 0.2:  # JupyterHub 6's schema: the options under "user_options"
            body = {"display_name": "hostile", "user_options": body}
        return Body(json.dumps(body, allow_nan=True).encode(), tuple(words), "+".join(kinds))


@dataclass
class Report(scenario.Report):
    bodies: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    kinds: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def summary(self) -> str:
        codes = ", ".join(f"{n} x {c}" for c, n in sorted(self.statuses.items()))
        return (f"{self.bodies:,} hostile bodies in {self.seconds:.0f} s ({codes}): "
                + self.outcome("every one refused with a 4xx that says why"))


def _send(hub: DemoHub, session: requests.Session, user: str, body: Body) -> tuple[int, str]:
    r = session.post(f"{hub.url}/hub/api/users/{user}/server", data=body.data,
                     headers={"Authorization": f"token {hub.token}", "Content-Type": "application/json"}, timeout=60)
    try:
        message = r.json().get("message", "")
    except (ValueError, AttributeError):
        message = r.text[:300]
    return r.status_code, message or ""


def _worker(hub: DemoHub, user: str, bodies: list[Body], report: Report) -> None:
    session = requests.Session()
    for body in bodies:
        code, message = _send(hub, session, user, body)
        report.statuses[code] = report.statuses.get(code, 0) + 1
        report.kinds[body.kind] = report.kinds.get(body.kind, 0) + 1
        if code in (201, 202):
            report.problems.append(f"{body.kind}: {body.data[:200]!r} was admitted")
            hub.api("DELETE", f"/users/{user}/server")
            hub.wait_stopped(user, timeout=120)
        elif not 400 <= code < 500:
            report.problems.append(f"{body.kind}: {body.data[:200]!r} got {code}: {message[:200]}")
        elif not any(w.lower() in message.lower() for w in body.words):
            report.problems.append(f"{body.kind}: {body.data[:200]!r} got {code} with a message that names none of "
                                   f"{body.words}: {message[:300]!r}")


def run(hub: DemoHub, count: int = 10_000, seed: int = 1) -> Report:
    users = [f"hostile{i}" for i in range(WORKERS)]
    r = hub.api("POST", "/users", json={"usernames": users})
    assert r.status_code in (201, 409), r.text
    pools = hub.gpus()["pools"]
    usable = [p["id"] for p in pools if p["resource"] == "nvidia.com/gpu" and p["free"]]
    restricted = [p["id"] for p in pools if p["resource"].startswith("nvidia.com/mig-")]
    gen = Generator(seed, usable, restricted)
    bodies = [gen.next() for _ in range(count)]
    report = Report(bodies=count)
    began = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=WORKERS) as ex:
        futures = [ex.submit(_worker, hub, user, bodies[i::WORKERS], report) for i, user in enumerate(users)]
        for f in futures:
            f.result()
    report.seconds = time.perf_counter() - began
    for user in users:
        if hub.pods("jupyterhub", labelSelector=f"hub.jupyter.org/username={user}"):
            report.problems.append(f"a pod exists for {user}")
    if hub.api("GET", "/").status_code != 200 or "pools" not in hub.gpus():
        report.problems.append("the hub does not answer after the hostile bodies")
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bodies", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    report = scenario.run_under_hub(lambda hub: run(hub, args.bodies, args.seed), HOSTILE_CONFIG)
    return scenario.finish(report, shown=50)


if __name__ == "__main__":
    sys.exit(main())
