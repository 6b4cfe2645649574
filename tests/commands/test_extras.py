"""The simulator's and the demo's dependencies are the ``demo`` extra: without it, ``gpuspawner
sim`` and ``gpuspawner demo`` say which extra to install instead of failing on an import."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from gpuspawner.cli import main
from gpuspawner.commands.extras import DEMO_MODULES, demo_extra_problem

ROOT = Path(__file__).resolve().parents[2]


def _extra(name: str) -> list[str]:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return project["optional-dependencies"][name]


def test_the_demo_modules_are_the_demo_extra():
    names = {re.split(r"[<>=!~ \[;]", req, maxsplit=1)[0].lower() for req in _extra("demo")}
    assert names == {dist.lower() for dist in DEMO_MODULES.values()}


def test_the_hub_does_not_install_the_simulators_dependencies():
    tomllib = pytest.importorskip("tomllib")
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    names = {re.split(r"[<>=!~ \[;]", req, maxsplit=1)[0].lower() for req in deps}
    assert names.isdisjoint(d.lower() for d in DEMO_MODULES.values())


def test_the_test_extra_includes_the_demo_extra():
    assert "gpuspawner[demo]" in _extra("test")


@pytest.mark.parametrize("command", ["sim", "demo"])
def test_without_the_extra_the_command_names_it(command, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ipykernel", None)  # as if it were not installed
    assert main([command]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"gpuspawner {command} needs" in err and "missing: ipykernel" in err
    assert "pip install 'gpuspawner[demo]'" in err


def test_with_the_extra_there_is_nothing_to_say():
    assert demo_extra_problem("sim") is None
