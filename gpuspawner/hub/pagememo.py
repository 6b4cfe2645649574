"""Remembering the spawn page's GPU offers and rendered forms between views.

A spawn-page view builds the offers (every GPU profile's pools, counts and CUDA fit:
``spawn.profiles.build_offers``), cuts them to what the user may use and renders the form:
~3.5 ms of the hub's event loop at 5,000 nodes (``benchmarks/capacity.py``), for every
user's every view. Nothing of it changes until the cluster's counts or the configuration do,
so the hub process keeps two :class:`Memo` objects (bounded, whatever the number of users):

* the offers built from one capacity snapshot's pools under one configuration, for every
  user: the snapshot's pool tuple is the same object until something in the cluster changes
  (``capacity.ledger``), and the configuration is compared by value (:func:`fingerprint`), so
  a ``pre_spawn_hook`` or ``profile_list`` callable that changes it per user is still right;
* the forms rendered from those offers, under what else the form shows (the user's groups,
  their saved options, the static profiles, the idle rules, the template): users who see the
  same page share one.

The page asks the cache for counts at most ``gpu_capacity_page_max_age`` seconds old
(``CapacityCache.snapshot(max_age=...)``), so on a busy cluster, whose counts change many
times a second, the offers are built once per interval, not once per view; a spawn is always
checked against the current counts. Pure: no I/O, no clock.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any, Callable, Generic, Hashable, TypeVar

__all__ = ["Memo", "fingerprint"]

T = TypeVar("T")


def fingerprint(*values: Any) -> str:
    """A comparable text of configuration values (dicts, lists, strings, numbers; anything else,
    such as a callable, by its ``repr``, which names the object). Dicts whose keys cannot be
    sorted together (say ``1`` and ``"a"``) are written in their own order."""
    try:
        return json.dumps(values, sort_keys=True, separators=(",", ":"), default=repr)
    except TypeError:
        return json.dumps(values, separators=(",", ":"), default=repr)


class Memo(Generic[T]):
    """The last ``size`` results, each under the object it was built from (compared by
    identity, and held, so its identity is not reused) and a hashable key."""

    def __init__(self, size: int = 8) -> None:
        if size < 1:
            raise ValueError(f"size must be at least 1, not {size!r}")
        self.size = size
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[tuple[int, Hashable], tuple[Any, T]] = OrderedDict()

    def get(self, source: Any, key: Hashable, build: Callable[[], T]) -> T:
        """The result for (``source``, ``key``), built by ``build()`` the first time."""
        slot = (id(source), key)
        entry = self._entries.get(slot)
        if entry is not None and entry[0] is source:
            self._entries.move_to_end(slot)
            self.hits += 1
            return entry[1]
        self.misses += 1
        value = build()
        self._entries[slot] = (source, value)
        self._entries.move_to_end(slot)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)
        return value
