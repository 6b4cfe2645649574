"""KubeSpawner's own test suite (the installed version's tag) against the test cluster.

``python -m tests.testcluster.kubespawner_upstream [--source GIT] [--junit FILE] [-- PYTEST ARGS]``
checks out ``tests/`` of jupyterhub/kubespawner at the tag of the installed version, starts a
control plane and the node agent with two nodes (their kubelet API on, for ``exec``), and runs
that suite with pytest against them, all at a raised CPU priority (``--nice``); it prints pytest's
summary and exits with pytest's status (docs/test-cluster.md, "KubeSpawner's own tests").
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path
from typing import Iterator

import yaml

REPO = Path(__file__).resolve().parents[2]
UPSTREAM = "https://github.com/jupyterhub/kubespawner"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpuspawner" / "kubespawner-tests"
NODES = ("ks-node-0", "ks-node-1")

# pytest-asyncio >= 1 ignores the suite's own session ``event_loop`` fixture (it was written for
# pytest-asyncio < 0.23): one loop for the whole session, as that fixture gave, by these settings
PYTEST_OPTIONS = ("-o", "asyncio_mode=auto", "-o", "asyncio_default_fixture_loop_scope=session",
                  "-o", "asyncio_default_test_loop_scope=session", "-p", "no:cacheprovider")

# the niceness the cluster and the suite run at: the suite's timings (check_up gives a server about
# four seconds to listen once its pod is Ready) assume a machine of their own, and the single-user
# server needs about 2.5 s of CPU to start; on a shared machine other work must not starve it
NICE = -10


def installed_version() -> str:
    return version("jupyterhub-kubespawner")


def checkout(source: str, tag: str) -> Path:
    """``tests/`` of ``source`` at ``tag``, cloned once into the cache; the suite's directory."""
    where = CACHE / tag
    tests = where / "tests"
    if (tests / "conftest.py").is_file():
        return tests
    where.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=where.parent) as tmp:
        clone = Path(tmp) / "src"
        cmd = ["git", "clone", "--quiet", "--branch", tag]
        if "://" in source:
            cmd += ["--depth", "1"]
        subprocess.run([*cmd, source, str(clone)], check=True, timeout=600)
        # the suite reads its own pyproject's pytest settings (addopts) from its root
        where.mkdir(parents=True, exist_ok=True)
        for name in ("tests", "pyproject.toml"):
            os.replace(clone / name, where / name)
    return tests


def node(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}},
            "status": {"capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                       "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}}}


AUTOGROUP = Path("/proc/self/autogroup")


def autogroup_nice() -> int | None:
    """The niceness of this session's scheduling group (Linux's autogroup: "/autogroup-12 nice 0"),
    None where the kernel has none."""
    try:
        return int(AUTOGROUP.read_text().split()[-1])
    except (OSError, ValueError, IndexError):
        return None


def _set_nice(nice: int, group: int | None) -> None:
    """This thread at ``nice``, then its session's group at ``group`` (None: left as it is)."""
    os.setpriority(os.PRIO_PROCESS, 0, nice)
    if group is not None:  # the session's group weighs as its niceness, whatever its processes' (sched(7))
        AUTOGROUP.write_text(str(group))


@contextlib.contextmanager
def niceness(nice: int) -> Iterator[int]:
    """This thread and its session's scheduling group, and what they start meanwhile, at ``nice``
    (only ever raised: a lower value than the current one); the old niceness back afterwards.
    Yields the niceness in effect: the old one where the machine refuses (a raise needs root)."""
    before, group = os.getpriority(os.PRIO_PROCESS, 0), autogroup_nice()
    try:
        _set_nice(min(before, nice), None if group is None else min(group, nice))
    except OSError as e:
        print(f"kubespawner_upstream: running at niceness {os.getpriority(os.PRIO_PROCESS, 0)} (session group: "
              f"{autogroup_nice()}), not {nice} ({e.strerror}): on a busy machine the suite's spawn tests may "
              "find their server not listening yet", file=sys.stderr)
    try:
        yield os.getpriority(os.PRIO_PROCESS, 0)
    finally:
        with contextlib.suppress(OSError):
            _set_nice(before, group)


def run(source: str, pytest_args: list[str], junit: str | None = None, nice: int = NICE) -> int:
    tests = checkout(source, installed_version())
    with niceness(nice):
        return _run(tests, pytest_args, junit)


def _run(tests: Path, pytest_args: list[str], junit: str | None) -> int:
    from testcluster import ControlPlane
    from testcluster.launcher import free_port

    with tempfile.TemporaryDirectory(prefix="kubespawner-upstream-") as d, ControlPlane(d) as cp:
        cluster = Path(d) / "nodes.yaml"
        cluster.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [node(n) for n in NODES]}))
        bin_dir = str(Path(sys.executable).parent)
        env = {**os.environ, "KUBECONFIG": str(cp.kubeconfig), "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
               "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
        agent_log = open(Path(d) / "nodeagent.log", "w")
        agent = subprocess.Popen(
            [sys.executable, "-m", "testcluster.nodeagent", "--cluster", str(cluster), "--kubeconfig",
             str(cp.kubeconfig), "--cluster-info", str(cp.data_dir / "cluster.json"),
             "--kubelet-port", str(free_port())],
            stdout=subprocess.PIPE, stderr=agent_log, cwd=REPO, env=env, text=True)
        try:
            line = agent.stdout.readline()
            if not line.startswith("nodeagent ready"):
                agent_log.flush()
                print(f"the node agent did not start: {line}{(Path(d) / 'nodeagent.log').read_text()[-3000:]}",
                      file=sys.stderr)
                return 3
            cmd = [sys.executable, "-m", "pytest", str(tests), *PYTEST_OPTIONS, *pytest_args]
            if junit:
                cmd.append(f"--junitxml={junit}")
            return subprocess.run(cmd, cwd=tests.parent, env=env).returncode
        finally:
            agent.terminate()
            try:
                agent.wait(30)
            except subprocess.TimeoutExpired:
                agent.kill()
                agent.wait(10)
            agent_log.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", default=os.environ.get("KUBESPAWNER_SOURCE", UPSTREAM),
                    help="the git repository to take the suite from (default: %(default)s)")
    ap.add_argument("--junit", metavar="FILE", help="write pytest's JUnit XML report here")
    ap.add_argument("--nice", type=int, default=NICE,
                    help="run the cluster and the suite at this niceness when it is lower than the current one "
                         "(needs root; default: %(default)s)")
    ap.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = ap.parse_args(argv)
    return run(args.source, args.pytest_args, args.junit, args.nice)


if __name__ == "__main__":
    sys.exit(main())
