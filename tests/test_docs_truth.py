"""The docs say what the code does, and nothing of one machine.

* no machine-specific path (a virtual environment or notes outside the repository) in the docs,
  the README, the package (its data and docstrings), the scripts or the benchmarks;
* docs/simulated-apiserver.md lists every resource and subresource the simulated API server serves,
  and says no API group is served only when none is;
* the pod-usage rule, in the README and docs/capacity.md, includes ``spec.overhead`` (as
  ``capacity/pod_requests.py`` counts it).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuspawner.sim.resources import RESOURCES, SUBRESOURCES

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


def _apiserver_doc() -> str:
    return (ROOT / "docs" / "simulated-apiserver.md").read_text()


def test_the_apiserver_doc_lists_what_is_served():
    table = "\n".join(line for line in _apiserver_doc().splitlines() if line.startswith("|"))
    missing = [plural for plural in RESOURCES if not re.search(rf"(?<![\w/]){re.escape(plural)}(?![\w])", table)]
    missing += [f"{plural}/{sub}" for plural, subs in SUBRESOURCES.items() for sub, _, _ in subs
                if f"`{plural}/{sub}`" not in table]
    assert missing == [], f"served but not in docs/simulated-apiserver.md's resource table: {missing}"


def test_the_apiserver_doc_says_which_api_groups_are_served():
    groups = sorted({info.group for info in RESOURCES.values() if info.group})
    doc = _apiserver_doc()
    says_none = "no API groups are served" in doc
    assert says_none == (not groups), (groups, says_none)
    for group in groups:
        assert group in doc, group


@pytest.mark.parametrize("doc", ["README.md", "docs/capacity.md"])
def test_the_pod_usage_rule_includes_overhead(doc):
    text = (ROOT / doc).read_text()
    rule = next(p for p in re.split(r"\n\s*\n|\n- |\n\* ", text) if "sidecar init container" in p)
    assert "spec.overhead" in rule, rule
