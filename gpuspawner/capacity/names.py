"""Friendly GPU model names: the same words for the same hardware whichever driver or label publishes it.

Pure: stdlib only. The rules are in docs/capacity.md, "GPU names".
"""

from __future__ import annotations

import functools
import re

__all__ = ["model_name", "pool_display_name"]

# form factors and memory types that GPU Feature Discovery's product label (the NVML name, spaces
# as '-'), NVIDIA's DRA driver's productName and AMD's node labeller keep in a name, but that say
# nothing a user chooses by: "NVIDIA-A100-SXM4-80GB", "NVIDIA H100 80GB HBM3",
# "AMD_Instinct_MI300X_OAM" (GFD's README; ROCm/k8s-device-plugin docs/user-guide/installation.md)
_DROP = re.compile(r"^(?:SXM\d*|PCIE|HBM\d*E?|OAM|SHARED|GDDR\d*X?)$", re.IGNORECASE)
_VENDOR_WORDS = {"nvidia": "NVIDIA", "amd": "AMD", "tesla": None}


@functools.lru_cache(maxsize=1024)
def model_name(product: str | None, vendor: str | None = None) -> str | None:
    """``NVIDIA A100 80GB`` for ``NVIDIA-A100-SXM4-80GB`` and ``NVIDIA A100-SXM4-80GB``; ``NVIDIA T4`` for
    ``Tesla-T4`` and ``Tesla-T4-SHARED``; ``AMD Instinct MI300X`` for ``AMD_Instinct_MI300X_OAM``.

    A MIG suffix (``-MIG-1g.10gb``, `` MIG 1g.10gb``) is cut off: the slice is named by
    :func:`pool_display_name`. ``vendor`` (``"nvidia"``/``"amd"``) adds the vendor word when the
    product lacks it. None when there is no product."""
    if not product:
        return None
    text = re.split(r"[-_ ]MIG(?:[-_ ]|$)", product, maxsplit=1)[0]
    words: list[str] = []
    for word in re.split(r"[-_\s]+", text):
        if not word or _DROP.match(word):
            continue
        key = word.lower()
        if key in _VENDOR_WORDS:
            # "Tesla" was the data-centre brand of the T4/V100 era; NVIDIA now names them "NVIDIA T4"
            continue
        if re.fullmatch(r"\d+GB", word, re.IGNORECASE):
            word = word[:-2] + "GB"
        words.append(word)
    if not words:
        return None
    brand = _brand(product, vendor)
    return " ".join(([brand] if brand else []) + words)


def _brand(product: str, vendor: str | None) -> str | None:
    lowered = product.lower()
    if lowered.startswith(("nvidia", "tesla")):
        return "NVIDIA"
    if lowered.startswith("amd"):
        return "AMD"
    return {"nvidia": "NVIDIA", "amd": "AMD"}.get(vendor or "")


def pool_display_name(product: str | None, vendor: str | None, mig_profile: str | None) -> str:
    """What a pool is called by default: its model (``NVIDIA A100 80GB``), with its MIG slice
    (``NVIDIA A100 80GB MIG 1g.10gb``); ``unknown GPU`` when nothing names it."""
    name = model_name(product, vendor) or "unknown GPU"
    return f"{name} MIG {mig_profile}" if mig_profile else name
