"""KubeSpawner's own test suite (the installed version's tag) against the test cluster.

``python -m tests.testcluster.kubespawner_upstream [--source GIT] [--junit FILE] [-- PYTEST ARGS]``
checks out ``tests/`` of jupyterhub/kubespawner at the tag of the installed version, starts a
control plane and the node agent with two nodes (their kubelet API on, for ``exec``), and runs
that suite with pytest against them; it prints pytest's summary and exits with pytest's status
(docs/test-cluster.md, "KubeSpawner's own tests").
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
UPSTREAM = "https://github.com/jupyterhub/kubespawner"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpuspawner" / "kubespawner-tests"
NODES = ("ks-node-0", "ks-node-1")

# pytest-asyncio >= 1 ignores the suite's own session ``event_loop`` fixture (it was written for
# pytest-asyncio < 0.23): one loop for the whole session, as that fixture gave, by these settings
PYTEST_OPTIONS = ("-o", "asyncio_mode=auto", "-o", "asyncio_default_fixture_loop_scope=session",
                  "-o", "asyncio_default_test_loop_scope=session", "-p", "no:cacheprovider")


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


def run(source: str, pytest_args: list[str], junit: str | None = None) -> int:
    from testcluster import ControlPlane
    from testcluster.launcher import free_port

    tests = checkout(source, installed_version())
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
    ap.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = ap.parse_args(argv)
    return run(args.source, args.pytest_args, args.junit)


if __name__ == "__main__":
    sys.exit(main())
