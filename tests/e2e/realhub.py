"""The former name of ``DemoHub`` (which now always runs on the real control plane behind the fault proxy)."""

from __future__ import annotations

from .harness import DemoHub, admin_session

RealHub = DemoHub

__all__ = ["RealHub", "admin_session"]
