"""Keeping CPython's cyclic garbage collector from stalling the hub's event loop.

A full collection walks every object the collector tracks, whatever allocated it: in a hub
that is ~280,000 objects after importing JupyterHub, KubeSpawner and kubernetes_asyncio, and
one pass over them takes ~180 ms on a 2-core machine (``benchmarks/hub.py``), during which no
request is answered. The capacity cache cannot make those passes cheaper by itself, but it
decides two things that set how often they come and how much they walk:

* :func:`paused` — while the informer parses and applies one list page (250 objects, tens of
  thousands of short-lived dicts and lists), automatic collection is paused. Otherwise the
  collections the parse triggers promote the page's objects to the oldest generation, and
  after a few pages a full collection runs (CPython runs one when the objects promoted since
  the last exceed a quarter of those that survived it). The page's objects are freed by
  reference counting when the page is done, so nothing is lost by not scanning them;
  collection resumes between pages.
* :func:`freeze` — once the first list is in, everything alive (the hub's modules, its
  application objects, the ledger's records) is moved to the permanent generation
  (``gc.freeze``, Python 3.7+), which collections never walk again. The records are acyclic
  and are still freed by reference counting when an event replaces them. What little cyclic
  garbage is pending at that moment is kept for good; the Python documentation's own recipe
  (``gc.freeze`` before ``fork``) accepts the same.

Both are process-wide, so both are optional (``CapacityCache(..., gc_freeze=...)``,
``c.GPUSpawner.gpu_capacity_gc_freeze``) and :func:`paused` never re-enables a collector
someone else disabled. Stdlib only.
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
