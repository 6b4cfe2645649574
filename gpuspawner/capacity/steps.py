"""Long synchronous work written as a generator of steps: run at once (``run``), or a slice at a
time on the event loop (``drive``), so that a re-list of 150,000 pods never holds the hub's loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Generator, Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")
Steps = Generator[None, None, T]

#: items handled between two steps: about a millisecond of a 2-core machine's work
EVERY = 2000


def of(value: T) -> Steps[T]:
    """No step: ``value`` at once (work too small to slice)."""
    yield from ()
    return value


def paced(items: Iterable[T], every: int = EVERY) -> Iterator[T | None]:
    """``items``, with a ``None`` (a step) after every ``every`` of them: ``for x in paced(...): if x
    is None: yield`` slices a loop. (None is no item here: the callers' items are strings,
    integers and tuples.)"""
    for i, item in enumerate(items, 1):
        yield item
        if i % every == 0:
            yield None


def run(steps: Steps[T]) -> T:
    """All the steps at once; their result."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


async def drive(steps: Steps[T], slice_seconds: float) -> T:
    """The steps, yielding to the event loop whenever ``slice_seconds`` of them have run; their result."""
    began = time.perf_counter()
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value
        if time.perf_counter() - began > slice_seconds:
            await asyncio.sleep(0)
            began = time.perf_counter()
