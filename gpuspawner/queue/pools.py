"""Queued pools on the spawn page and in ``GET /hub/api/gpus``: a full pool with a queue can be chosen.
Design notes: docs/kueue.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from gpuspawner.queue.rules import QueueRule, queue_for
from gpuspawner.spawn.profiles import PoolOffer, ProfileOffer


def _queueable(offer: PoolOffer, cap: int | None) -> PoolOffer:
    """A full pool's offer as a queue sees it: as many GPUs as its largest node holds (Kueue admits,
    then the scheduler places the pod on one node), none of them now."""
    pool = offer.pool
    scale = pool.scale_up.gpus_per_node if pool.scale_up is not None else 0
    biggest = max(pool.max_allocatable, scale)
    if cap is not None:
        biggest = min(biggest, cap)
    if not offer.checked or offer.available or biggest <= 0 or not pool.pinnable:
        return offer
    return replace(offer, max_gpus=biggest, now=0, scale_up_minutes=None, reason=None, queued=True)


def queue_offers(offers: Mapping[str, ProfileOffer], rules: Iterable[QueueRule]) -> dict[str, ProfileOffer]:
    """``offers`` with each full pool that queues (a rule for its profile and pool) open to choose."""
    rules = tuple(rules)
    if not rules:
        return dict(offers)
    out = {}
    for slug, offer in offers.items():
        pools = tuple(
            _queueable(p, p.cap) if queue_for(rules, slug, p.pool.id) is not None else p for p in offer.pools
        )
        out[slug] = offer if all(a is b for a, b in zip(pools, offer.pools)) else replace(offer, pools=pools)
    return out


def queued_pool_ids(offers: Mapping[str, ProfileOffer], rules: Iterable[QueueRule]) -> dict[tuple[str, str], str]:
    """(profile slug, pool id) -> LocalQueue, for every offered pool that queues."""
    rules = tuple(rules)
    found = {}
    for slug, offer in offers.items():
        for p in offer.pools:
            rule = queue_for(rules, slug, p.pool.id)
            if rule is not None:
                found[(slug, p.pool.id)] = rule.queue
    return found


def pool_queue(rules: Iterable[QueueRule], pool_id: str,
               counts: Callable[[str], tuple[int, int] | None]) -> dict[str, Any] | None:
    """A pool's ``"queue"`` in ``GET /hub/api/gpus``: None when no rule queues it, else
    ``{"name": <LocalQueue>, "pending": N, "admitted": M}`` (the LocalQueue's status; counts None
    while the hub has not read it)."""
    # a rule limited to some profiles still gives the pool a queue (for those profiles' servers)
    rule = next((r for r in rules if r.matches_pool(pool_id)), None)
    if rule is None:
        return None
    found = counts(rule.queue)
    pending, admitted = found if found is not None else (None, None)
    return {"name": rule.queue, "pending": pending, "admitted": admitted}


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def full_card_text(pending: int | None) -> str:
    """What a full queued pool's card says."""
    if pending is None:
        return "Full — you can queue for a GPU here"
    waiting = "nobody waiting" if pending == 0 else f"{pending} waiting"
    return f"Full — {waiting}; you would be {ordinal(pending + 1)}"
