"""Keeping CPython's cyclic garbage collector from stalling the hub's event loop.
Design notes: docs/capacity.md.
"""

from __future__ import annotations

import contextlib
import gc
import logging
from collections.abc import Iterator

log = logging.getLogger(__name__)

_depth = 0  # nesting of paused() (the nodes and pods informers may both be inside)
_paused_by_us = False


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """Pause automatic cyclic collection for the block (re-entrant, across coroutines)."""
    global _depth, _paused_by_us
    if _depth == 0 and gc.isenabled():
        gc.disable()
        _paused_by_us = True
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0 and _paused_by_us:
            _paused_by_us = False
            gc.enable()


def freeze(reason: str) -> None:
    """Move every object the collector tracks to the permanent generation (not counted:
    ``gc.get_freeze_count`` walks them all, itself a stall of milliseconds)."""
    gc.freeze()
    log.info("%s: the objects the hub holds now are out of the cyclic garbage collector's reach (gc.freeze)",
             reason)
