"""Warnings about one odd cluster object, logged once per distinct object and reason (not on every
watch event that repeats it)."""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

__all__ = ["warn_once", "forget"]

_MAX_KEYS = 4096  # distinct warnings remembered; the oldest is forgotten first (and may be logged again)
_seen: "OrderedDict[Hashable, None]" = OrderedDict()


def warn_once(logger: logging.Logger, key: Hashable, msg: str, *args: Any) -> bool:
    """Log ``msg % args`` at WARNING unless ``key`` was logged before; True when logged."""
    if key in _seen:
        _seen.move_to_end(key)
        return False
    _seen[key] = None
    if len(_seen) > _MAX_KEYS:
        _seen.popitem(last=False)
    logger.warning(msg, *args)
    return True


def forget() -> None:
    """Tests: log every warning again."""
    _seen.clear()
