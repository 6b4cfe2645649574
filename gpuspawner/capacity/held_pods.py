"""The pods without GPUs that hold CPU, memory and a pod slot on a node, kept as small as can be.
Design notes: docs/capacity.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from gpuspawner.capacity import steps

__all__ = ["HeldPods"]

_BITS = 62
_MASK = (1 << _BITS) - 1


class HeldPods:
    """``key -> (node, cpu millicores, memory bytes, ephemeral storage bytes)``, packed.

    Keys are stored by their hash (a 64-bit integer; two pods' keys colliding among 150,000 has a
    chance below one in a billion), node names once each."""

    __slots__ = ("_by_key", "_node_ids", "_nodes")

    def __init__(self) -> None:
        self._by_key: dict[int, int] = {}
        self._node_ids: dict[str, int] = {}
        self._nodes: list[str] = []

    def __len__(self) -> int:
        return len(self._by_key)

    def _pack(self, rec: tuple[str, int, int, int]) -> int:
        node, cpu, memory, ephemeral = rec
        nid = self._node_ids.get(node)
        if nid is None:
            nid = self._node_ids[node] = len(self._nodes)
            self._nodes.append(node)
        cpu, memory, ephemeral = (min(max(v, 0), _MASK) for v in (cpu, memory, ephemeral))
        return (((nid << 40 | cpu) << _BITS | memory) << _BITS) | ephemeral

    def _unpack(self, packed: int) -> tuple[str, int, int, int]:
        ephemeral = packed & _MASK
        packed >>= _BITS
        memory = packed & _MASK
        packed >>= _BITS
        cpu = packed & ((1 << 40) - 1)
        return (self._nodes[packed >> 40], cpu, memory, ephemeral)

    def get(self, key: str) -> tuple[str, int, int, int] | None:
        packed = self._by_key.get(hash(key))
        return None if packed is None else self._unpack(packed)

    def put(self, key: str, rec: tuple[str, int, int, int]) -> None:
        self._by_key[hash(key)] = self._pack(rec)

    def pop(self, key: str) -> tuple[str, int, int, int] | None:
        packed = self._by_key.pop(hash(key), None)
        return None if packed is None else self._unpack(packed)

    def retain(self, keep: Iterable[str]) -> list[tuple[str, int, int, int]]:
        """Drop every pod not in ``keep`` (after a re-list); returns what they held."""
        return steps.run(self.retain_steps(keep))

    def retain_steps(self, keep: Iterable[str]) -> steps.Steps[list[tuple[str, int, int, int]]]:
        """``retain`` as steps of a thousand pods or so: at 150,000 pods it is 100 ms of work."""
        wanted: set[int] = set()
        for k in steps.paced(keep):
            if k is None:
                yield
            else:
                wanted.add(hash(k))
        gone: list[int] = []
        for h in steps.paced(list(self._by_key)):  # a copy: others may run between the steps
            if h is None:
                yield
            elif h not in wanted:
                gone.append(h)
        dropped = []
        for h in steps.paced(gone):
            if h is None:
                yield
            else:
                packed = self._by_key.pop(h, None)
                if packed is not None:
                    dropped.append(self._unpack(packed))
        return dropped

    def records(self) -> Iterator[tuple[int, tuple[str, int, int, int]]]:
        """``(key hash, record)`` of every pod (for a full recount)."""
        for h, packed in self._by_key.items():
            yield h, self._unpack(packed)
