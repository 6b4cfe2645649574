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
_deferred: tuple[int, int, int] | None = None  # the thresholds defer_full() replaced
#: the oldest generation's threshold while full collections wait: never reached
_NEVER = 1 << 30


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


def defer_full() -> None:
    """No automatic full collection (the oldest generation's) until :func:`allow_full`; the young
    generations' collections go on. While the cache reads the cluster for the first time, a full
    pass walks everything it has kept so far (the full-size hub benchmark: 81 ms at 150,000 pods);
    after its freeze (:func:`freeze`) a full pass walks only what came since."""
    global _deferred
    if _deferred is None:
        _deferred = gc.get_threshold()
        gc.set_threshold(_deferred[0], _deferred[1], _NEVER)


def allow_full() -> None:
    """Full collections as before :func:`defer_full` (a no-op when none were deferred)."""
    global _deferred
    if _deferred is not None:
        threshold, _deferred = _deferred, None
        gc.set_threshold(*threshold)
