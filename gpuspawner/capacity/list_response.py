"""Reading a Kubernetes list response one item at a time.  Design notes: docs/capacity.md."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

__all__ = ["ITEM", "iter_list"]

ITEM = object()  # the key under which iter_list yields each element of "items"

_DECODER = json.JSONDecoder()
_WHITESPACE = " \t\n\r"


def _skip(text: str, at: int) -> int:
    while at < len(text) and text[at] in _WHITESPACE:
        at += 1
    return at


def _expect(text: str, at: int, what: str) -> int:
    at = _skip(text, at)
    if not text.startswith(what, at):
        found = repr(text[at]) if at < len(text) else "the end"
        raise json.JSONDecodeError(f"Expecting {what!r}, found {found}", text, at)
    return at + 1


def _array(text: str, at: int, end: list[int]) -> Iterator[Any]:
    """Each element of the array that opens at ``at``; then the index after it goes to ``end``."""
    at = _skip(text, _expect(text, at, "["))
    if not text.startswith("]", at):
        while True:
            value, at = _DECODER.raw_decode(text, _skip(text, at))
            yield value
            at = _skip(text, at)
            if text.startswith("]", at):
                break
            at = _expect(text, at, ",")
    end.append(at + 1)


def iter_list(body: bytes | str) -> Iterator[tuple[Any, Any]]:
    """``(ITEM, element)`` for each element of the top-level ``items`` array, and ``(key, value)``
    for every other top-level field, in document order. Raises ``json.JSONDecodeError`` (a
    ``ValueError``) where the document is not a JSON object, as ``json.loads`` would."""
    text = body.decode("utf-8") if isinstance(body, (bytes, bytearray)) else body
    at = _skip(text, _expect(text, 0, "{"))
    if not text.startswith("}", at):
        while True:
            key, at = _DECODER.raw_decode(text, _skip(text, at))
            if not isinstance(key, str):
                raise json.JSONDecodeError("Expecting property name enclosed in double quotes", text, at)
            at = _expect(text, at, ":")
            if key == "items" and text.startswith("[", _skip(text, at)):
                end: list[int] = []
                for value in _array(text, at, end):
                    yield ITEM, value
                at = end[0]
            else:
                value, at = _DECODER.raw_decode(text, _skip(text, at))
                yield key, value
            at = _skip(text, at)
            if text.startswith("}", at):
                break
            at = _expect(text, at, ",")
    _end(text, at + 1)


def _end(text: str, at: int) -> None:
    at = _skip(text, at)
    if at != len(text):
        raise json.JSONDecodeError("Extra data", text, at)
