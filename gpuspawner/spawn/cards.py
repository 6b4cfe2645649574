"""The words of a pool's card on the spawn page: what is free, in what a user gets, and what sharing means.

Pure: the capacity layer's records only. docs/spawn-page.md shows the cards these words make.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuspawner.capacity.model import PoolView
from gpuspawner.capacity.names import model_name
from gpuspawner.capacity.sharing import MIG, MPS, TIME_SLICING, mig_fraction
from gpuspawner.spawn.scale_up import wait_words

__all__ = ["CardWords", "card_words", "unit_of", "plural", "nodes_name", "image_ready_words"]

def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def unit_of(pool: PoolView) -> str:
    """What one unit of the pool is to a user: ``"share"`` of a shared GPU, ``"slice"`` (MIG) or ``"GPU"``."""
    if pool.shared:
        return "share"
    if pool.mig_profile or pool.sharing == MIG:
        return "slice"
    return "GPU"


def _short_model(pool: PoolView) -> str:
    """The model without its vendor word (``T4``, ``A100 80GB``), for "shares of one T4"."""
    product = pool.dra.product_name if pool.dra is not None else pool.product
    name = model_name(product, pool.vendor) or "GPU"
    for brand in ("NVIDIA ", "AMD "):
        if name.startswith(brand) and len(name) > len(brand):
            return name[len(brand):]
    return name


def nodes_name(pool: PoolView) -> str:
    """``T4 nodes``: the nodes of a pool, by their GPU, for "T4 nodes have 3.9 CPUs"."""
    return f"{_short_model(pool)} nodes"


@dataclass(frozen=True)
class CardWords:
    unit: str  # "GPU", "slice", "share"
    free: str  # "3 of 4 shares of one T4, on 1 node"
    sharing: str | None  # what sharing means here, or None for a whole GPU
    memory: str | None  # "15 GiB, shared by every share"


def _gib(mib: int | float) -> str:
    gib = mib / 1024
    return f"{gib:.0f}" if gib >= 10 or gib == int(gib) else f"{gib:.1f}"


def _free_words(pool: PoolView, unit: str, free: int) -> str:
    if pool.nodes == 0 and pool.scale_up is not None:
        return wait_words(pool.scale_up.minutes)  # never "0 of 0 GPUs on 0 nodes"
    nodes = plural(pool.nodes, "node")
    if unit == "share":
        physical = pool.physical
        of = f"one {_short_model(pool)}" if physical == 1 else f"{physical} {_short_model(pool)} GPUs"
        text = f"{free} of {pool.total} shares of {of}, on {nodes}"
    else:
        text = f"{free} of {plural(pool.total, unit)} on {nodes}"
    if free < pool.free:
        text += f" ({pool.free - free} more on nodes without room for this server's CPU or memory)"
    return text


def _sharing_words(pool: PoolView) -> str | None:
    profile = pool.mig_profile
    if profile:
        product = pool.dra.product_name if pool.dra is not None else pool.product
        frac = mig_fraction(profile, product)
        text = f"{profile}: "
        if frac is not None:
            slices, whole, gb = frac
            text += f"{slices}/{whole} of an {_short_model(pool)}, {gb} GB; "
        text += "a hardware-isolated slice with its own memory and compute"
        if pool.shared:
            text += f", itself shared by up to {pool.replicas} servers"
        return text
    if pool.sharing == TIME_SLICING:
        if pool.shared:
            return (f"Time-sliced: each GPU is shared by up to {pool.replicas} servers, with no memory or fault "
                    "isolation; the whole memory is shared, and one server's crash can stop the others")
        return "Time-slicing is set for this GPU: the processes of your server take turns on it"
    if pool.sharing == MPS:
        if pool.shared:
            each = f", about {_gib(pool.memory_mib / pool.replicas)} GiB of memory each" if pool.memory_mib else ""
            return (f"MPS: each GPU is shared by up to {pool.replicas} servers{each}; memory and compute are "
                    "limited per server, faults are not isolated")
        return "MPS is set for this GPU: the processes of your server share it through MPS"
    return None


def _memory_words(pool: PoolView, unit: str) -> str | None:
    if not pool.memory_mib:
        return None
    gib = _gib(pool.memory_mib)
    if unit == "share" and pool.sharing == MPS:
        return f"about {_gib(pool.memory_mib / pool.replicas)} GiB per share ({gib} GiB per GPU)"
    if unit == "share":
        return f"{gib} GiB per GPU, shared by all its {pool.replicas} shares"
    return f"{gib} GiB per {unit}"


def card_words(pool: PoolView, free: int | None = None) -> CardWords:
    """The words of ``pool``'s card (:class:`CardWords`); ``free``: the free count of the nodes with
    room for the server (None: the pool's)."""
    unit = unit_of(pool)
    free = pool.free if free is None else free
    return CardWords(unit, _free_words(pool, unit, free), _sharing_words(pool), _memory_words(pool, unit))


def image_ready_words(cached: int, nodes: int) -> str | None:
    """``Image ready on 3 of 5 nodes``: of a pool's ``nodes`` (Ready, schedulable), ``cached`` hold the
    image, so a server there starts without pulling it. None for a pool with no node now."""
    if nodes <= 0:
        return None
    return f"Image ready on {min(cached, nodes)} of {plural(nodes, 'node')}"
