"""End to end: a hub whose GPUSpawner configuration is wrong does not start.

``jupyterhub -f <the demo's config>`` (which loads the gpuspawner config snippet first, then the
site's own file, as a real hub does) with a site file that sets wrong values: the hub exits with
status 1 within seconds, before it starts its proxy, and prints one line per problem on stderr,
the same lines ``config_problems`` gives, and no traceback.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from traitlets.config import Config

from tests.builders.traits import WRONG_TRAIT_VALUES
from gpuspawner import GPUSpawner
from gpuspawner.commands.demo import DEMO_CONFIG
from gpuspawner.hub.config_check import config_problems

from .cullenv import demo_config_env
from .harness import free_port

pytestmark = [pytest.mark.integration, pytest.mark.hub]


def start_hub(tmp_path, settings: dict) -> tuple[int, str, float]:
    """Start a hub whose site config sets ``settings`` on c.GPUSpawner; its exit status, stderr, seconds."""
    site = tmp_path / "site_config.py"
    site.write_text("".join(f"c.GPUSpawner.{name} = {value!r}\n" for name, value in settings.items()))
    env = demo_config_env(tmp_path, free_port(), "0123456789abcdef", site, tmp_path / "no-kubeconfig")
    began = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(DEMO_CONFIG)], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:  # it started after all: stop it and what it started
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    return proc.returncode, err, time.monotonic() - began


def expected(settings: dict) -> list[str]:
    config = Config()
    for name, value in settings.items():
        config.GPUSpawner[name] = value
    return config_problems(config, GPUSpawner)


def test_a_hub_with_every_setting_wrong_exits_with_one_line_for_each(tmp_path):
    settings = {}
    for name, value, _ in WRONG_TRAIT_VALUES:  # the first wrong value of each trait a config file can write
        if name not in settings and repr(value) == repr(eval(repr(value))):
            settings[name] = value
    lines = expected(settings)
    assert len(lines) == len(settings)  # one line for each setting (the table has every trait: test_configcheck)
    status, err, seconds = start_hub(tmp_path, settings)
    assert status == 1, err
    assert f"gpuspawner: the hub does not start: {len(lines)} problems in its GPUSpawner configuration:" in err
    printed = [line[2:] for line in err.splitlines() if line.startswith("  c.GPUSpawner.")]
    assert printed == lines, err
    assert "Traceback" not in err and "Proxying" not in err and "is now running" not in err, err
    assert seconds < 60, seconds


def test_one_wrong_value_after_the_snippet_is_enough(tmp_path):
    status, err, _ = start_hub(tmp_path, {"gpu_resources": ["cpu"]})
    assert status == 1, err
    assert ("  c.GPUSpawner.gpu_resources = ['cpu']: 'cpu' is not a device's extended resource: write <vendor "
            "domain>/<name>, e.g. 'nvidia.com/gpu'") in err, err
    assert "1 problem in its GPUSpawner configuration" in err and "Traceback" not in err, err
