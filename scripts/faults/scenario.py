"""What every fault scenario shares: its report, the demo hub it runs under, and its exit.

* :class:`Report`: the problems a scenario found (none when every check held) and the end of its
  one-line summary;
* :func:`run_under_hub`: the demo's hub (a real JupyterHub and configurable-http-proxy on Kubernetes'
  own control plane, its faults injected by the fault proxy in front of the API server) started with
  the scenario's extra ``jupyterhub_config.py``, the scenario run against it, stopped whatever happened;
* :func:`finish`: the summary on stdout, the problems on stderr, exit status 0 when all held,
  1 otherwise.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Protocol, TypeVar

if TYPE_CHECKING:
    from tests.e2e.harness import DemoHub

__all__ = ["Report", "finish", "run_under_hub"]


@dataclass
class Report:
    """The base of a scenario's report: what went wrong, one line each."""

    problems: list[str] = field(default_factory=list)

    def outcome(self, held: str, noun: str = "problems") -> str:
        """The end of the summary: ``held`` when there was no problem, else how many."""
        return held if not self.problems else f"{len(self.problems)} {noun}"


class Summarised(Protocol):
    problems: list[str]

    def summary(self) -> str: ...


R = TypeVar("R", bound=Report)


def run_under_hub(run: "Callable[[DemoHub], R]", config: str | None = None) -> R:
    """``run`` against a started demo hub, with ``config`` as its extra jupyterhub_config.py."""
    from tests.e2e.harness import DemoHub  # the in-memory scenarios need no hub

    extra = None
    if config is not None:
        extra = Path(tempfile.mkdtemp(prefix="gpuspawner-faults-")) / "extra_config.py"
        extra.write_text(config)
    hub = DemoHub(extra_config=str(extra) if extra else None).start()
    print("real control plane: " + ", ".join(f"{k} {v:.1f}" for k, v in hub.timings.items()), flush=True)
    try:
        return run(hub)
    finally:
        hub.stop()


def finish(report: Summarised, shown: int | None = None) -> int:
    """Print the summary and (the first ``shown`` of) the problems; the exit status."""
    print(report.summary())
    for p in report.problems[:shown]:
        print(p, file=sys.stderr)
    return 1 if report.problems else 0
