"""The argument types the commands share: a bad value is argparse's one-line error, exit 2."""

from __future__ import annotations

import argparse

import pytest

from gpuspawner.cli import build_parser
from gpuspawner.commands.arguments import loopback, port


@pytest.mark.parametrize("value, expected", [("0", 0), ("8000", 8000), ("65535", 65535)])
def test_port(value, expected):
    assert port(value) == expected


@pytest.mark.parametrize(
    "value, words",
    [("http", "'http' is not a port number"), ("65536", "port 65536 is out of range"), ("-1", "out of range")],
)
def test_bad_port_says_what_to_give(value, words):
    with pytest.raises(argparse.ArgumentTypeError, match=words):
        port(value)


@pytest.mark.parametrize("value", ["127.0.0.1", "127.3.2.1", "::1", "localhost"])
def test_loopback(value):
    assert loopback(value) == value


@pytest.mark.parametrize("value", ["0.0.0.0", "10.0.0.1", "example.com"])
def test_not_loopback(value):
    with pytest.raises(argparse.ArgumentTypeError, match="not a loopback address"):
        loopback(value)


@pytest.mark.parametrize("command, flag", [("sim", "--port"), ("demo", "--port"), ("demo", "--k8s-port")])
def test_sim_and_demo_share_the_port_check(command, flag, capsys):
    with pytest.raises(SystemExit) as e:
        build_parser(command).parse_args([command, flag, "99999"])
    assert e.value.code == 2
    assert "port 99999 is out of range: use 1-65535, or 0 for any free port" in capsys.readouterr().err
