"""The docs say what the code does, and nothing of one machine.

* no machine-specific path (a virtual environment or notes outside the repository) in the docs,
  the README, the package (its data and docstrings), the scripts or the benchmarks;
* docs/test-cluster.md names every kind a cluster file may hold (the loader's);
* the pod-usage rule, in the README and docs/capacity.md, includes ``spec.overhead`` (as
  ``capacity/pod_requests.py`` counts it).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from testcluster.node.loader import KINDS

ROOT = Path(__file__).resolve().parent.parent
MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:work|root|Users)/|(?<![\w.~-])/home/(?!jovyan\b)|/venv/bin/")
CHECKED = [
    *sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md",
    *sorted((ROOT / "gpuspawner").rglob("*.py")), *sorted((ROOT / "gpuspawner" / "data").rglob("*.yaml")),
    *sorted((ROOT / "scripts").rglob("*.py")), *sorted((ROOT / "scripts").glob("*.sh")),
    *sorted((ROOT / "benchmarks").rglob("*.py")),
]


@pytest.mark.parametrize("path", CHECKED, ids=[str(p.relative_to(ROOT)) for p in CHECKED])
def test_no_machine_specific_paths(path):
    hits = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
            for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1) if MACHINE_PATH.search(line)]
    assert hits == []


def test_the_test_cluster_doc_names_every_kind_a_cluster_file_holds():
    doc = (ROOT / "docs" / "test-cluster.md").read_text()
    assert [k for k in KINDS if f"`{k}`" not in doc] == []


@pytest.mark.parametrize("doc", ["README.md", "docs/capacity.md"])
def test_the_pod_usage_rule_includes_overhead(doc):
    text = (ROOT / doc).read_text()
    rule = next(p for p in re.split(r"\n\s*\n|\n- |\n\* ", text) if "sidecar init container" in p)
    assert "spec.overhead" in rule, rule
