"""``gpuspawner demo`` and ``gpuspawner sim`` say what to do when the test cluster cannot run: no
``testcluster/`` (an installed package, not a checkout), or its binaries not built."""

from __future__ import annotations

import sys

import pytest

from gpuspawner.commands import testbed


@pytest.fixture
def no_binaries(tmp_path, monkeypatch):
    """An interpreter whose folder, and a PATH whose folders, hold none of the cluster's binaries."""
    monkeypatch.setattr(sys, "executable", str(tmp_path / "bin" / "python"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("GPUSPAWNER_CLUSTER_BIN", raising=False)


@pytest.mark.parametrize("command", ["demo", "sim"])
def test_missing_binaries_say_to_run_setup(no_binaries, command):
    problem = testbed.problem(command)
    assert problem == (f"gpuspawner {command}: gpuspawner-cluster and gpuspawner-kubelet-api not found: run "
                       "scripts/setup.sh in the gpuspawner checkout (it builds them with Go >= 1.26 into .venv/bin)")


def test_an_installation_without_the_checkout_says_where_the_test_cluster_is(tmp_path, monkeypatch):
    monkeypatch.setattr(testbed, "CHECKOUT", tmp_path)
    problem = testbed.problem("demo")
    assert problem.startswith("gpuspawner demo runs Kubernetes' own control plane from a source checkout's "
                              "testcluster/")
    assert "run scripts/setup.sh there" in problem


def test_the_binaries_next_to_the_interpreter_are_found():
    """Setup links them into .venv/bin: found without an activated virtual environment."""
    assert testbed.problem("demo") is None


def test_a_missing_binary_ends_the_demo_before_anything_starts(no_binaries, capsys):
    import argparse

    from gpuspawner.commands import demo

    parser = argparse.ArgumentParser()
    demo.add_arguments(parser)
    assert demo.main(parser.parse_args(["--port", "0"])) == 2
    err = capsys.readouterr().err
    assert "gpuspawner demo: gpuspawner-cluster and gpuspawner-kubelet-api not found: run scripts/setup.sh" in err
