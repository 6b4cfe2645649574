"""Argument types the commands share (``argparse`` ``type=`` callables).
Design notes: docs/architecture.md.
"""

from __future__ import annotations

import argparse
import ipaddress

__all__ = ["port", "loopback"]


def port(value: str) -> int:
    """A TCP port, 0 meaning any free port."""
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a port number") from None
    if not 0 <= n <= 65535:
        raise argparse.ArgumentTypeError(f"port {n} is out of range: use 1-65535, or 0 for any free port")
    return n


def loopback(value: str) -> str:
    """A loopback address: the simulated cluster answers only on this machine."""
    try:
        ok = ipaddress.ip_address(value).is_loopback
    except ValueError:
        ok = value == "localhost"
    if not ok:
        raise argparse.ArgumentTypeError(f"{value!r} is not a loopback address: use 127.0.0.1 (or another 127.x.y.z)")
    return value
