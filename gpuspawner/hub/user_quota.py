"""What a user's other servers hold, for the quota check and the spawn page's quota line."""

from __future__ import annotations

from typing import Any

from gpuspawner.spawn.access import principal_of
from gpuspawner.spawn.quota import HeldServer, OtherServer, held_servers

__all__ = ["held_elsewhere", "quota_view"]


def held_elsewhere(spawner: Any, profile_list: Any) -> list[HeldServer]:
    """The GPUs each of this user's other active servers holds (``quota.held_servers``)."""
    others = [
        OtherServer(
            name=s.name,
            user_options=s.user_options,
            recorded=getattr(s, "gpu_held", None),
            spawning=s.pending == "spawn",
        )
        for s in spawner.user.spawners.values()
        if s is not spawner and s.active
    ]
    return held_servers(
        others,
        gpu_profiles={spec.slug for spec in spawner.spawn_config().specs},
        default_profile=next((p.get("slug") for p in profile_list if p.get("default")), None),
    )


def quota_view(spawner: Any, profile_list: Any) -> tuple[int, int] | None:
    """``(GPUs this user may hold, GPUs their other servers hold)`` for the spawn page; None when
    no quota limits them."""
    policy = spawner.spawn_config().quota
    if not policy.enabled:
        return None
    limit = policy.limit_for(principal_of(spawner.user)).gpus
    if limit is None:
        return None
    held = sum(h.gpus for h in held_elsewhere(spawner, profile_list) if h.name != spawner.name and h.gpus > 0)
    return limit, held
