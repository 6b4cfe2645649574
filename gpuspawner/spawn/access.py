"""Who may use which GPUs: allowed groups; GPU quotas are ``quota``."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any

from gpuspawner.capacity.model import PoolView

if TYPE_CHECKING:  # the profile layer sits above this one; no runtime import
    from gpuspawner.spawn.profiles import GPUProfileSpec, ProfileOffer

__all__ = [
    "ALLOWED_GROUPS_KEY",
    "AccessError",
    "AccessRules",
    "Principal",
    "UserOffers",
    "check_access",
    "offers_for",
    "parse_allowed_groups",
    "principal_of",
    "visible_pools",
]

ALLOWED_GROUPS_KEY = "allowed_groups"
# the user option name of profiles.GPU_POOL_OPTION
_POOL_OPTION = "gpu_pool"
_MAX_SHOWN_GROUPS = 5


class AccessError(ValueError):
    """A spawn refused by the access rules or the quota (``quota``); ``status`` is the
    HTTP status the spawner raises it with (always 403 today)."""

    def __init__(self, message: str, status: int = 403):
        super().__init__(message)
        self.status = status


# --- who is asking ------------------------------------------------------------------


@dataclass(frozen=True)
class Principal:
    """The owner of a server (or the reader of ``GET /hub/api/gpus``)."""

    name: str
    groups: frozenset[str] = frozenset()
    admin: bool = False


def principal_of(user: Any) -> Principal:
    """A :class:`Principal` from JupyterHub's ``User`` wrapper, an ``orm.User``
    or an ``orm.Service`` (duck-typed: ``name``, ``admin``, ``groups``).

    ``user.groups`` is a list of ``orm.Group`` (each with a ``name``);
    services have no groups. Group names are matched exactly, as JupyterHub
    stores them (case-sensitive).
    """
    name = getattr(user, "name", None)
    groups = set()
    for g in getattr(user, "groups", None) or ():
        gname = g if isinstance(g, str) else getattr(g, "name", None)
        if isinstance(gname, str):
            groups.add(gname)
    return Principal(
        name=name if isinstance(name, str) else "",
        groups=frozenset(groups),
        admin=getattr(user, "admin", False) is True,
    )


# --- allowed groups ------------------------------------------------------------------


def parse_allowed_groups(value: Any, where: str) -> frozenset[str]:
    """``allowed_groups`` from config: a list of JupyterHub group names.

    ``None`` and ``[]`` mean everyone; a single string is refused (write
    ``["staff"]``), as a list is needed. Names padded with spaces are refused
    rather than stripped: JupyterHub compares group names exactly, so
    ``" staff"`` would silently match nobody.
    """
    if value is None:
        return frozenset()
    if isinstance(value, str):
        raise ValueError(f"{where}: 'allowed_groups' must be a list of JupyterHub group names, not the string "
                         f"{value!r}: write [{value!r}]")
    if not isinstance(value, (list, tuple, set, frozenset)):
        raise ValueError(
            f"{where}: 'allowed_groups' must be a list of JupyterHub group names like "
            f"['staff', 'gpu-users'], not {value!r}"
        )
    groups = set()
    for g in value:
        if not isinstance(g, str) or not g:
            raise ValueError(
                f"{where}: 'allowed_groups' must hold non-empty group names, not {g!r}"
            )
        if g != g.strip():
            raise ValueError(
                f"{where}: group name {g!r} in 'allowed_groups' has spaces around it; "
                f"write {g.strip()!r} (group names are matched exactly)"
            )
        groups.add(g)
    return frozenset(groups)


def _may(groups: frozenset[str], who: Principal) -> bool:
    return who.admin or not groups or bool(groups & who.groups)


def _ask_for(groups: Iterable[str]) -> str:
    names = sorted(set(groups))
    if not names:
        return "ask your admin for access"
    shown = ", ".join(repr(n) for n in names[:_MAX_SHOWN_GROUPS])
    if len(names) > _MAX_SHOWN_GROUPS:
        shown += f" (and {len(names) - _MAX_SHOWN_GROUPS} more)"
    return f"ask your admin to add you to one of the groups {shown}"


@dataclass(frozen=True)
class AccessRules:
    """The ``allowed_groups`` of the GPU profiles and the pool rules.

    ``profiles`` maps a profile slug to its groups (only restricted profiles
    are listed). ``pools`` keeps, in the admin's order, the pool rules that
    set ``allowed_groups``: a pool's groups come from the *first* of them its
    id matches, as a pool's name and order come from the first rule it
    matches (``profiles.present_pools``). Rules without the key are skipped,
    so a rule that only renames a pool never opens it to everyone, and an
    earlier rule with ``allowed_groups: []`` makes an exception to a later,
    broader restriction.
    """

    profiles: Mapping[str, frozenset[str]] = field(default_factory=dict)
    pools: tuple[tuple[str, frozenset[str]], ...] = ()

    @classmethod
    def from_config(
        cls, gpu_profiles: Iterable[Any] = (), gpu_pool_rules: Iterable[Any] = ()
    ) -> AccessRules:
        """Read ``allowed_groups`` from ``c.GPUSpawner.gpu_profiles`` and
        ``c.GPUSpawner.gpu_pool_rules``; a mistake raises ``ValueError`` with
        the item's position and what to write instead. The other keys are
        checked by ``GPUProfileSpec.from_config`` / ``PoolRule.from_config``."""
        profiles: dict[str, frozenset[str]] = {}
        for i, d in enumerate(gpu_profiles):
            where = f"gpu_profiles[{i}]"
            if not isinstance(d, Mapping):
                raise ValueError(
                    f"{where}: each GPU profile must be a dict like {{'slug': 'gpu'}}, not {d!r}"
                )
            slug = d.get("slug")
            if not isinstance(slug, str) or not slug:
                raise ValueError(f"{where}: 'slug' is required, like 'gpu', not {slug!r}")
            groups = parse_allowed_groups(d.get(ALLOWED_GROUPS_KEY), f"{where} (slug {slug!r})")
            if groups:
                profiles[slug] = groups
        pools: list[tuple[str, frozenset[str]]] = []
        for j, r in enumerate(gpu_pool_rules):
            where = f"gpu_pool_rules[{j}]"
            if not isinstance(r, Mapping):
                raise ValueError(
                    f"{where}: each rule must be a dict like {{'match': 'gpu-a100:*'}}, not {r!r}"
                )
            if ALLOWED_GROUPS_KEY not in r:
                continue
            match = r.get("match")
            if not isinstance(match, str) or not match:
                raise ValueError(
                    f"{where}: 'match' is required: a pool id or glob like 'gpu-a100:*', "
                    f"not {match!r}"
                )
            groups = parse_allowed_groups(r[ALLOWED_GROUPS_KEY], f"{where} (match {match!r})")
            pools.append((match, groups))
        return cls(profiles=profiles, pools=tuple(pools))

    @property
    def restricted(self) -> bool:
        """Whether any profile or pool is closed to someone."""
        return bool(self.profiles) or any(groups for _, groups in self.pools)

    def profile_groups(self, slug: str) -> frozenset[str]:
        return self.profiles.get(slug, frozenset())

    def pool_groups(self, pool_id: str) -> frozenset[str]:
        for match, groups in self.pools:
            if fnmatchcase(pool_id, match):
                return groups
        return frozenset()

    def may_use_profile(self, who: Principal, slug: str) -> bool:
        return _may(self.profile_groups(slug), who)

    def may_use_pool(self, who: Principal, pool_id: str) -> bool:
        return _may(self.pool_groups(pool_id), who)


@dataclass(frozen=True)
class UserOffers:
    """The GPU offers one user sees, and what was taken out of them."""

    offers: dict[str, ProfileOffer]  # slug -> offer with only the pools the user may use
    hidden_profiles: frozenset[str]  # GPU profile slugs the user may not use
    all_offers: Mapping[str, ProfileOffer]  # as built from capacity, before access
    rules: AccessRules
    principal: Principal

    def drop_hidden(self, profile_list: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """``profile_list`` without entries whose slug is a hidden GPU profile.

        Call it on the static profiles before ``merge_profiles(static,
        view.offers)``: a static profile that a GPU profile of the same slug
        shadows must not reappear for a user who may not use that GPU profile.
        """
        return [dict(p) for p in profile_list if p.get("slug") not in self.hidden_profiles]

    def groups_for_profile(self, slug: str) -> frozenset[str]:
        """The groups that would open a hidden profile to this user."""
        groups = self.rules.profile_groups(slug)
        if groups and not _may(groups, self.principal):
            return groups
        offer = self.all_offers.get(slug)
        out: set[str] = set()
        for p in offer.pools if offer is not None else ():
            out |= self.rules.pool_groups(p.pool.id)
        return frozenset(out)

    def groups_for_pool(self, pool_id: str) -> frozenset[str]:
        """The groups that would open a pool to this user."""
        groups = self.rules.pool_groups(pool_id)
        if groups and not _may(groups, self.principal):
            return groups
        out: set[str] = set()
        for slug, offer in self.all_offers.items():
            if offer.pool(pool_id) is not None:
                out |= self.rules.profile_groups(slug)
        return frozenset(out)


def offers_for(
    who: Principal, offers: Mapping[str, ProfileOffer], rules: AccessRules
) -> UserOffers:
    """The offers (``profiles.build_offers``) cut down to what ``who`` may use.

    A profile is hidden when its ``allowed_groups`` leave ``who`` out, or when
    it had pools and the pool rules leave ``who`` none of them (the form would
    otherwise say "no GPUs right now", as if they were only busy). A profile
    that offers no pool because capacity is unknown stays, with its problem.
    """
    visible: dict[str, ProfileOffer] = {}
    hidden: set[str] = set()
    for slug, offer in offers.items():
        if not rules.may_use_profile(who, slug):
            hidden.add(slug)
            continue
        pools = tuple(p for p in offer.pools if rules.may_use_pool(who, p.pool.id))
        if offer.pools and not pools:
            hidden.add(slug)
            continue
        if len(pools) < len(offer.pools):
            offer = dataclasses.replace(offer, pools=pools)
        visible[slug] = offer
    return UserOffers(
        offers=visible,
        hidden_profiles=frozenset(hidden),
        all_offers=dict(offers),
        rules=rules,
        principal=who,
    )


def check_access(user_options: Any, view: UserOffers) -> None:
    """Refuse (403) a request that names a GPU profile or pool its user may not use.

    Run it before ``options.validate_user_options(..., view.offers)``, which
    then sees only what the user may use: anything that is not exactly a
    profile slug or pool id the hub offers (another case, spaces, a glob, a
    pool hidden by a rule, a non-string) is left to it and answered 400
    "unknown", with hints that list only the user's own pools. This check
    adds only the clearer 403 for an exact name the user is not allowed; the
    message names the groups that would open it (not the pool's GPUs or
    capacity) so the user knows what to ask for.
    """
    if not isinstance(user_options, Mapping):
        return
    slug = user_options.get("profile")
    if isinstance(slug, str) and slug in view.hidden_profiles:
        raise AccessError(
            f"profile {slug!r} is not available to you; {_ask_for(view.groups_for_profile(slug))}, "
            "or choose another profile"
        )
    pool_id = user_options.get(_POOL_OPTION)
    if not isinstance(pool_id, str) or not pool_id:
        return
    known = any(o.pool(pool_id) is not None for o in view.all_offers.values())
    usable = any(o.pool(pool_id) is not None for o in view.offers.values())
    if known and not usable:
        raise AccessError(
            f"GPU pool {pool_id!r} is not available to you; "
            f"{_ask_for(view.groups_for_pool(pool_id))}, or choose another pool"
        )


def visible_pools(
    pools: Iterable[PoolView],
    rules: AccessRules,
    who: Principal,
    profiles: Sequence[GPUProfileSpec] = (),
) -> tuple[PoolView, ...]:
    """The pools ``GET /hub/api/gpus`` shows ``who``: admins see all.

    A pool is left out when a pool rule closes it to ``who``, or when every
    GPU profile that admits it (``spec.admits``) is closed to ``who``. A pool
    no profile admits is shown as before (the endpoint reports capacity; the
    access rules only take away what they close).
    """
    if who.admin:
        return tuple(pools)
    out = []
    for pool in pools:
        if not rules.may_use_pool(who, pool.id):
            continue
        admitting = [spec for spec in profiles if spec.admits(pool.id)]
        if admitting and not any(rules.may_use_profile(who, spec.slug) for spec in admitting):
            continue
        out.append(pool)
    return tuple(out)
