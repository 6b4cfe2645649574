"""The config snippet (``jupyterhub_config.d/gpuspawner.py``) and the garbage collector: once
its imports are done it collects, then freezes what is left (docs/capacity.md, "Garbage
collection"). Run in a fresh interpreter, as a hub loads it, so the test process's own
collector is left alone."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from gpuspawner import config_snippet

PROBE = textwrap.dedent(
    """
    import gc, json, sys, weakref
    from traitlets.config import Config

    class Cycle:
        pass

    garbage = Cycle()
    garbage.self = garbage            # cyclic garbage, reachable only by the collector
    gone = weakref.ref(garbage)
    del garbage
    gc.disable()                      # nothing collects it before the snippet runs
    gc.enable() if sys.argv[2] == "enabled" else None
    c = Config()
    path = sys.argv[1]
    exec(compile(open(path).read(), path, "exec"), {"c": c})
    print(json.dumps({
        "frozen": gc.get_freeze_count(),
        "enabled": gc.isenabled(),
        "garbage_collected": gone() is None,
        "spawner_class": c.JupyterHub.spawner_class,
        "jupyterhub_imported": "jupyterhub.apihandlers.base" in sys.modules,
    }))
    """
)


def run_snippet(gc_state: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, str(config_snippet()), gc_state],
                         capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout)


def test_snippet_collects_then_freezes_what_its_imports_left():
    result = run_snippet("enabled")
    assert result["spawner_class"] == "gpu" and result["jupyterhub_imported"]
    assert result["garbage_collected"]  # collected first: no garbage is kept for good
    assert result["frozen"] > 50_000  # JupyterHub, KubeSpawner, kubernetes_asyncio, gpuspawner
    assert result["enabled"]  # the collector keeps running for what the hub allocates later


def test_snippet_leaves_a_disabled_collector_disabled():
    result = run_snippet("disabled")
    assert result["garbage_collected"] and result["frozen"] > 50_000
    assert not result["enabled"]
