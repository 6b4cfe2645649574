"""GPU quotas: how many GPUs one user may hold at once."""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuspawner.spawn.access import AccessError, Principal

__all__ = [
    "HeldServer",
    "Limit",
    "OtherServer",
    "QuotaPolicy",
    "check_quota",
    "held_servers",
    "server_gpus",
    "server_label",
]

# the user option name of profiles.GPU_COUNT_OPTION
_COUNT_OPTION = "gpus"


def _quota_value(value: Any, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(
            f"{where} must be a whole number of GPUs (0 or more) or None for no limit, "
            f"not {value!r}"
        )
    return value


@dataclass(frozen=True)
class Limit:
    gpus: int | None  # None: no limit
    source: str  # for messages: "the default quota", "the quota of group 'x'", ...


@dataclass(frozen=True)
class QuotaPolicy:
    """GPU quotas: ``default`` for everyone, ``by_group`` overrides, ``admin``
    for admins. ``None`` means no limit.

    A user's limit is the most generous override among their groups, else
    the default. Most generous, because JupyterHub groups are flat (no group
    is more specific than another), membership is how an admin grants
    something (as with ``allowed_groups``: any one group opens a pool), and
    adding a user to a group should never take GPUs away. An override may be
    lower than the default: it replaces it (e.g. a ``guests: 0`` group).
    Admins have no limit unless ``admin`` is set.
    """

    default: int | None = None
    by_group: Mapping[str, int | None] = field(default_factory=dict)
    admin: int | None = None

    @classmethod
    def from_config(
        cls, default: Any = None, by_group: Any = None, admin: Any = None
    ) -> QuotaPolicy:
        """From ``gpu_quota``, ``gpu_quota_by_group`` and ``gpu_quota_admin``;
        a mistake raises ``ValueError`` naming the setting."""
        groups: dict[str, int | None] = {}
        if by_group is not None and not isinstance(by_group, Mapping):
            raise ValueError(
                "gpu_quota_by_group must be a dict of group name to GPUs like "
                f"{{'staff': 8, 'students': 1}}, not {by_group!r}"
            )
        for name, value in (by_group or {}).items():
            if not isinstance(name, str) or not name or name != name.strip():
                raise ValueError(f"gpu_quota_by_group: {name!r} is not a JupyterHub group name")
            groups[name] = _quota_value(value, f"gpu_quota_by_group[{name!r}]")
        return cls(
            default=_quota_value(default, "gpu_quota"),
            by_group=groups,
            admin=_quota_value(admin, "gpu_quota_admin"),
        )

    @property
    def enabled(self) -> bool:
        """Whether anyone can be limited at all."""
        limits = (self.default, self.admin, *self.by_group.values())
        return any(v is not None for v in limits)

    def limit_for(self, who: Principal) -> Limit:
        if who.admin:
            return Limit(self.admin, "the quota for admins")
        best: tuple[str, int | None] | None = None
        for group in sorted(who.groups & self.by_group.keys()):
            value = self.by_group[group]
            if best is None or (best[1] is not None and (value is None or value > best[1])):
                best = (group, value)
        if best is not None:
            return Limit(best[1], f"the quota of group {best[0]!r}")
        return Limit(self.default, "the default quota")


@dataclass(frozen=True)
class HeldServer:
    name: str  # "" is the default server
    gpus: int


def server_label(name: str) -> str:
    return f"server {name!r}" if name else "default server"


def _plural(n: int) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def _whole(value: Any) -> int | None:
    """A whole number >= 0 from an int, an integral float or a digit string
    (a pod annotation is a string); None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, float):
        return int(value) if math.isfinite(value) and value.is_integer() and value >= 0 else None
    if isinstance(value, str):
        text = value.strip()
        return int(text) if text.isascii() and text.isdigit() and len(text) <= 9 else None
    return None


def server_gpus(
    user_options: Any,
    *,
    recorded: Any = None,
    spawning: bool = False,
    gpu_profiles: Collection[str],
    default_profile: str | None,
) -> int:
    """How many GPUs one of the user's active servers holds or is about to hold.

    ``recorded`` is what the spawner wrote down when that server's request
    passed its quota check (``GPUSpawner.gpu_held``: kept in the spawner's
    state across hub restarts, and equal to the pod annotation
    ``gpuspawner.io/gpus``), 0 when it was refused: it wins.

    Nothing recorded and ``spawning`` (JupyterHub's ``spawner.pending ==
    "spawn"``): that spawn has not reached its check yet and will be checked
    against this one when it does, so it counts 0 here; the first spawn to be
    checked wins and the other is refused. Nothing recorded otherwise (a
    server started before the hub recorded counts): the count is read from
    its ``user_options`` as ``options.validate_user_options`` reads them: a
    GPU profile (named, or the default one when ``profile`` is absent) without
    ``gpus`` is 1 GPU; a count validation would refuse is 0.
    """
    n = _whole(recorded)
    if n is not None:
        return n
    if spawning or not isinstance(user_options, Mapping):
        return 0
    slug = user_options.get("profile") or default_profile
    if not isinstance(slug, str) or slug not in gpu_profiles:
        return 0
    raw = user_options.get(_COUNT_OPTION)
    if raw is None or raw == "":
        return 1
    return _whole(raw) or 0


@dataclass(frozen=True)
class OtherServer:
    """One of the user's other active servers (running or pending), as the
    spawner sees it: ``spawner.name``, ``spawner.user_options``,
    ``spawner.gpu_held`` and ``spawner.pending == "spawn"``."""

    name: str
    user_options: Any = None
    recorded: Any = None
    spawning: bool = False


def held_servers(
    servers: Iterable[OtherServer],
    *,
    gpu_profiles: Collection[str],
    default_profile: str | None,
) -> list[HeldServer]:
    """The GPUs each of the user's other active servers holds (:func:`server_gpus`)."""
    return [
        HeldServer(
            s.name,
            server_gpus(
                s.user_options,
                recorded=s.recorded,
                spawning=s.spawning,
                gpu_profiles=gpu_profiles,
                default_profile=default_profile,
            ),
        )
        for s in servers
    ]


def check_quota(
    who: Principal,
    policy: QuotaPolicy,
    held: Iterable[HeldServer],
    asked: int,
    *,
    server_name: str = "",
) -> None:
    """Refuse (403) a request for ``asked`` GPUs that would take ``who`` over
    their limit. ``held`` are the user's other active servers; an entry named
    ``server_name`` (the server being started) is ignored, since restarting a
    server replaces what it held."""
    limit = policy.limit_for(who)
    if limit.gpus is None or asked <= 0:
        return
    others = [h for h in held if h.name != server_name and h.gpus > 0]
    holding = sum(h.gpus for h in others)
    if holding + asked <= limit.gpus:
        return
    if limit.gpus == 0:
        raise AccessError(
            f"you may not hold any GPUs ({limit.source} is 0); ask your admin for a GPU quota, "
            "or choose a profile without GPUs"
        )
    may = f"may hold {limit.gpus} ({limit.source})"
    if not others:
        raise AccessError(f"you asked for {_plural(asked)} but {may}: ask for at most {limit.gpus}")
    others.sort(key=lambda h: (-h.gpus, h.name))
    parts = ", ".join(f"{server_label(h.name)}: {h.gpus}" for h in others)
    left = limit.gpus - holding
    text = f"you hold {_plural(holding)} ({parts}) and {may}"
    if left <= 0:
        raise AccessError(f"{text}: stop a server to start this one")
    ask = "1" if left == 1 else f"at most {left}"
    raise AccessError(f"{text}: stop a server or ask for {ask}")
