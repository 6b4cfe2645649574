"""How long an image pull on a node that does not hold the image will take, in words.

Pure: the image's size and the pull rate in, "15 GB image, about 4 min" out (docs/prepull.md).
"""

from __future__ import annotations

import math

from gpuspawner.capacity.nodeimages import normalize_image

__all__ = ["size_words", "pull_estimate", "same_image"]


def same_image(a: str | None, b: str | None) -> bool:
    """Whether two references name one image, however spelled (``pt:1``, ``docker.io/library/pt:1``)."""
    ref = normalize_image(a) if a else None
    return ref is not None and ref == (normalize_image(b) if b else None)


def size_words(size_bytes: int) -> str:
    """``15 GB``, ``2.5 GB``, ``320 MB`` (decimal units, as registries give image sizes)."""
    gb = size_bytes / 1e9
    if gb >= 10:
        return f"{gb:.0f} GB"
    if gb >= 1:
        return f"{gb:.1f} GB".replace(".0 GB", " GB")
    return f"{max(size_bytes / 1e6, 1):.0f} MB"


def pull_estimate(size_bytes: int | None, mb_per_second: float | None) -> str | None:
    """``15 GB image, about 4 min``: the time to pull ``size_bytes`` at ``mb_per_second`` MB/s,
    rounded to whole minutes ("under a minute" below one). None when either is unknown."""
    if not size_bytes or size_bytes <= 0 or not mb_per_second or mb_per_second <= 0:
        return None
    seconds = size_bytes / (mb_per_second * 1e6)
    minutes = max(1, math.floor(seconds / 60 + 0.5))
    when = "under a minute" if seconds < 60 else f"about {minutes} min"
    return f"{size_words(size_bytes)} image, {when}"
