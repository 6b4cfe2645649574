"""An invalid cluster file given to ``gpuspawner sim`` or ``gpuspawner demo`` ends in the error that
names the object and the field (the loader's, or the real API server's own validation), exit status 2,
and no traceback."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys

import pytest

BAD_LABEL = """\
apiVersion: v1
kind: Node
metadata:
  name: gpu-1
  labels:
    team: "has spaces!"
status:
  allocatable: {cpu: "8", memory: 32Gi, pods: "110", nvidia.com/gpu: "1"}
"""
NOT_YAML = "kind: Node\nmetadata: [unclosed\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpuspawner", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    "text, words",
    [
        (BAD_LABEL, 'Node "gpu-1" is invalid: metadata.labels: Invalid value: "has spaces!"'),
        (NOT_YAML, "not valid YAML or JSON"),
    ],
    ids=["invalid-label-value", "not-yaml"],
)
@pytest.mark.parametrize("command", ["sim", "demo"])
def test_an_invalid_cluster_file_is_a_clear_error(tmp_path, command, text, words):
    if command == "demo" and not shutil.which("configurable-http-proxy"):
        pytest.fail("configurable-http-proxy is missing: run scripts/setup.sh")
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    extra = ["--port", str(free_port())] if command == "demo" else []
    r = run(command, "--cluster", str(path), *extra)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr + r.stdout
    assert r.stderr.startswith(f"gpuspawner {command}: cannot load the cluster {path}: "), r.stderr
    assert words in r.stderr
