"""GPU profiles offered to a user, built from admin config and live capacity."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from typing import Any

from gpuspawner.capacity.health import figures_age
from gpuspawner.capacity.model import CapacitySnapshot, DriverGroup, FitCount, PoolView
from gpuspawner.cuda.image import ImageCuda
from gpuspawner.capacity.names import model_name
from gpuspawner.capacity.node_resources import request_words, shortfall_words
from gpuspawner.spawn.cards import CardWords, card_words, nodes_name
from gpuspawner.spawn.cuda_fit import GroupFit, PoolFit, ProfileImages, profile_images
from gpuspawner.spawn.tolerations import DEFAULT_TOLERATED_TAINT_KEYS, refused_by_taint

GPU_POOL_OPTION = "gpu_pool"
GPU_COUNT_OPTION = "gpus"
GPU_OPTIONS = (GPU_POOL_OPTION, GPU_COUNT_OPTION)

# A slug becomes part of form field names (``profile-option-<slug>--<option>``,
# KubeSpawner's _options_from_form) and of HTML ids; keep it plain.
_SLUG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_OPTION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.]*$")

_SPEC_KEYS = {
    "slug",
    "display_name",
    "description",
    "default",
    "kubespawner_override",
    "pools",
    "max_gpus",
    "profile_options",
    "allowed_groups",  # read by gpuspawner.spawn.access
    "cuda",
}
_RULE_KEYS = {"match", "display_name", "hide", "allowed_groups"}  # allowed_groups: gpuspawner.spawn.access


def _fail(where: str, msg: str) -> ValueError:
    return ValueError(f"{where}: {msg}")


def _globs(where: str, value: Any, name: str) -> tuple[str, ...]:
    if isinstance(value, str):  # one glob where a list is needed: say so rather than guess
        raise _fail(where, f"'{name}' must be a list of pool ids or globs, not the string {value!r}: "
                           f"write [{value!r}]")
    if not isinstance(value, (list, tuple)) or not all(
        isinstance(v, str) and v for v in value
    ):
        raise _fail(
            where,
            f"'{name}' must be a list of pool ids or globs such as "
            f"['gpu-a100:*', '*:nvidia.com/mig-*'], not {value!r}",
        )
    return tuple(value)


@dataclass(frozen=True)
class GPUProfileSpec:
    """One admin-declared GPU profile (an item of ``c.GPUSpawner.gpu_profiles``)."""

    slug: str
    display_name: str
    description: str = ""
    default: bool = False
    kubespawner_override: Mapping[str, Any] = field(default_factory=dict)
    include: tuple[str, ...] = ("*",)
    exclude: tuple[str, ...] = ()
    max_gpus: int | None = None
    profile_options: Mapping[str, Any] = field(default_factory=dict)
    # what the profile's image (or each image choice) carries: CUDA, NVIDIA_REQUIRE_CUDA, cuda-compat
    images: ProfileImages = field(default_factory=ProfileImages)

    @classmethod
    def from_config(cls, d: Any, where: str = "gpu_profiles") -> GPUProfileSpec:
        if not isinstance(d, Mapping):
            raise _fail(where, f"each GPU profile must be a dict like {{'slug': 'gpu'}}, not {d!r}")
        unknown = sorted(set(d) - _SPEC_KEYS)
        if unknown:
            raise _fail(
                where,
                f"unknown key(s) {', '.join(map(repr, unknown))}; "
                f"a GPU profile may have {', '.join(sorted(_SPEC_KEYS))}",
            )
        slug = d.get("slug")
        if not isinstance(slug, str) or not _SLUG_RE.match(slug):
            raise _fail(
                where,
                f"'slug' is required and must be letters, digits, '-', '_' or '.', "
                f"like 'gpu', not {slug!r}",
            )
        where = f"{where} (slug {slug!r})"
        display_name = d.get("display_name", slug)
        description = d.get("description", "")
        for key, value in (("display_name", display_name), ("description", description)):
            if not isinstance(value, str):
                raise _fail(where, f"'{key}' must be a string, not {value!r}")
        default = d.get("default", False)
        if not isinstance(default, bool):
            raise _fail(where, f"'default' must be True or False, not {default!r}")
        override = d.get("kubespawner_override", {})
        if not isinstance(override, Mapping):
            raise _fail(where, f"'kubespawner_override' must be a dict, not {override!r}")
        pools = d.get("pools", {})
        if not isinstance(pools, Mapping) or set(pools) - {"include", "exclude"}:
            raise _fail(
                where,
                "'pools' must be a dict with 'include' and/or 'exclude' lists of pool "
                f"id globs, e.g. {{'include': ['gpu-a100:*']}}, not {pools!r}",
            )
        include = _globs(where, pools.get("include", ["*"]), "pools.include")
        exclude = _globs(where, pools.get("exclude", []), "pools.exclude")
        max_gpus = d.get("max_gpus")
        if max_gpus is not None and (
            isinstance(max_gpus, bool) or not isinstance(max_gpus, int) or max_gpus < 1
        ):
            raise _fail(where, f"'max_gpus' must be a positive integer or None, not {max_gpus!r}")
        options = d.get("profile_options", {})
        if not isinstance(options, Mapping):
            raise _fail(where, f"'profile_options' must be a dict, not {options!r}")
        for name, option in options.items():
            if name in GPU_OPTIONS:
                raise _fail(
                    where,
                    f"profile option {name!r} is reserved: gpuspawner fills it from the "
                    "live GPU pools; rename your option",
                )
            if not isinstance(name, str) or not _OPTION_RE.match(name) or "--" in name:
                raise _fail(where, f"profile option name {name!r} must be letters, digits, '_' or '.'")
            if not isinstance(option, Mapping) or not (
                option.get("choices") or (option.get("unlisted_choice") or {}).get("enabled")
            ):
                raise _fail(
                    where,
                    f"profile option {name!r} needs 'choices' (a dict of choices) or an "
                    "enabled 'unlisted_choice', as in KubeSpawner's profile_list",
                )
        image = override.get("image")
        images = profile_images(
            d.get("cuda"), image if isinstance(image, str) else None, options, where
        )
        return cls(
            slug=slug,
            display_name=display_name,
            description=description,
            default=default,
            kubespawner_override=dict(override),
            include=include,
            exclude=exclude,
            max_gpus=max_gpus,
            profile_options=dict(options),
            images=images,
        )

    def admits(self, pool_id: str) -> bool:
        return any(fnmatchcase(pool_id, g) for g in self.include) and not any(
            fnmatchcase(pool_id, g) for g in self.exclude
        )


@dataclass(frozen=True)
class PoolRule:
    """How pools whose id matches ``match`` (a glob) are presented."""

    match: str
    display_name: str | None = None
    hide: bool = False

    @classmethod
    def from_config(cls, d: Any, where: str = "gpu_pool_rules") -> PoolRule:
        if not isinstance(d, Mapping):
            raise _fail(where, f"each rule must be a dict like {{'match': 'gpu-a100:*'}}, not {d!r}")
        unknown = sorted(set(d) - _RULE_KEYS)
        if unknown:
            raise _fail(
                where,
                f"unknown key(s) {', '.join(map(repr, unknown))}; a rule may have "
                "'match' (a pool id or glob), 'display_name', 'hide', 'allowed_groups'",
            )
        match = d.get("match")
        if not isinstance(match, str) or not match:
            raise _fail(where, f"'match' is required: a pool id or glob like 'gpu-a100:*', not {match!r}")
        name = d.get("display_name")
        if name is not None and not isinstance(name, str):
            raise _fail(where, f"'display_name' must be a string, not {name!r}")
        hide = d.get("hide", False)
        if not isinstance(hide, bool):
            raise _fail(where, f"'hide' must be True or False, not {hide!r}")
        return cls(match=match, display_name=name, hide=hide)


def default_pool_name(pool: PoolView) -> str:
    """The pool's friendly model name (``NVIDIA A100 80GB``, ``NVIDIA A100 80GB MIG 1g.10gb``),
    the same whichever driver publishes the hardware (``PoolView.display_name``)."""
    return pool.display_name


def present_pools(
    pools: Iterable[PoolView], rules: Sequence[PoolRule]
) -> list[tuple[PoolView, str]]:
    """Visible pools with their display names, in the admin's order.

    A pool takes the first rule its id matches: hidden if that rule hides it,
    renamed if it names it, and ordered by that rule's position; pools no rule
    matches come last. Ties are broken by pool id, so the order is stable.
    """
    ranked = []
    for pool in pools:
        rank, name = len(rules), default_pool_name(pool)
        for i, rule in enumerate(rules):
            if fnmatchcase(pool.id, rule.match):
                if rule.hide:
                    rank = -1
                else:
                    rank = i
                    name = rule.display_name or name
                break
        if rank >= 0:
            ranked.append((rank, pool.id, pool, name))
    ranked.sort(key=lambda r: (r[0], r[1]))
    return [(pool, name) for _, _, pool, name in ranked]


def capacity_problem(snapshot: CapacitySnapshot | None) -> str | None:
    """Why live capacity cannot be trusted now, or None when it can; once figures were
    read, how old they are (``capacity.health.figures_age``)."""
    if snapshot is None:
        return "GPU capacity is unknown: the hub could not start watching the cluster"
    if snapshot.healthy and snapshot.synced and not snapshot.error:
        return None
    if snapshot.error:
        why = snapshot.error
    elif not snapshot.synced:
        why = "the hub has not finished reading the cluster yet"
    else:
        why = "the hub has lost its watch on the cluster"
    age = f"; {figures_age(snapshot.age_seconds)}" if snapshot.synced else ""
    return f"GPU capacity is unknown: {why}{age}"


@dataclass(frozen=True)
class PoolOffer:
    """What one server of a profile may get from one pool."""

    pool: PoolView
    display_name: str
    max_gpus: int  # the most one server may ask for (0: none now)
    now: int  # how many of those can start without a scale-up
    scale_up_minutes: float | None  # set when counts above ``now`` wait for a new node
    reason: str | None = None  # why ``max_gpus`` is 0
    checked: bool = True  # False: admitted without a free-count check
    # image key (see cudacheck.ProfileImages) -> how that image fits this pool's drivers
    cuda: Mapping[str, PoolFit] = field(default_factory=dict)
    cap: int | None = None  # the most one server may ask for (profile and hub), kept for recounting
    # set by for_image when the image's CUDA steers the pod off some nodes: the
    # free GPUs on the nodes it may still land on (``max_gpus``/``now`` count those only)
    cuda_free: int | None = None
    # why one server may not have more than ``max_gpus`` here, when a sharing rule bounds it
    limit_note: str | None = None
    # image key -> what the server's pod asks of its node (CPU, memory, ephemeral storage, pods;
    # resource_requests.profile_requests); ``request``: the one these counts are for (None: not counted)
    requests: Mapping[str | None, tuple[int, ...]] = field(default_factory=dict)
    request: tuple[int, ...] | None = None
    # the free GPUs on the nodes where that request fits now (None: not counted); ``never``: why
    # no node of the pool can ever hold it (its nodes are too small), in words
    fit_free: int | None = None
    fit_most: int | None = None
    never: str | None = None
    # a full pool opened to a Kueue queue (queue.pools): Kueue admits it, the counts are not a bound
    queued: bool = False
    # why no server lands on any of the pool's nodes: a hard taint none tolerates, in words
    # (taints.refused_by_taint); then also ``reason``
    taint_refusal: str | None = None

    def fit(self, image_key: str | None) -> PoolFit | None:
        return self.cuda.get(image_key) if image_key is not None else None

    @property
    def words(self) -> CardWords:
        """What the pool's card says of it (``cards.card_words``), its free count that of the nodes
        with room for the server."""
        return card_words(self.pool, self.fit_free)

    @property
    def model(self) -> str:
        """The GPU model, without any MIG slice (``NVIDIA A100 80GB``): what the page groups by."""
        product = self.pool.dra.product_name if self.pool.dra is not None else self.pool.product
        return model_name(product, self.pool.vendor) or "Other GPUs"

    @property
    def no_image_fits(self) -> bool:
        """Whether the CUDA check refuses every image of the profile on this pool's drivers."""
        return bool(self.cuda) and all(f.refused for f in self.cuda.values())

    @property
    def follows_api(self) -> bool:
        """Whether the API's pool counts are this card's (no fit or sharing rule narrows them)."""
        narrowed = self.fit_free is not None and (
            self.fit_free != self.pool.free or self.fit_most != self.pool.max_free_per_node)
        return not narrowed and self.limit_note is None and self.never is None and not self.no_image_fits

    @property
    def narrowed(self) -> bool:
        """Whether the counts are those of the nodes one image's driver fits."""
        return self.cuda_free is not None

    def excluded(self, image_key: str | None) -> tuple[GroupFit, ...]:
        """The driver groups the pod of ``image_key`` is kept off
        (cuda_fit.steering_expressions): the failing ones, unless all fail
        (then the spawn is refused, nothing is steered)."""
        fit = self.fit(image_key)
        return fit.excluded if fit is not None else ()

    @property
    def steered(self) -> bool:
        """Whether some image of the profile keeps its pod off some nodes of this pool."""
        return any(f.excluded for f in self.cuda.values())

    def for_image(self, image_key: str | None) -> PoolOffer:
        """This offer for the pod of ``image_key``: when the CUDA check keeps
        it off some driver groups, what is free and the most one server can
        get now are counted over the other groups only (a pod's GPUs come from
        one node, and the required node affinity of
        ``cuda_fit.steering_expressions`` makes the scheduler's NodeAffinity
        filter drop the failing nodes). A new node from a scale-up is not
        excluded, so it still counts. When the image asks its node for other
        CPU or memory, the counts are those of the nodes where it fits.
        Offers without a free count (capacity unknown) and pools with no
        failing node and the same request are returned as they are."""
        bad = self.excluded(image_key)
        request = self.requests.get(image_key, self.requests.get(None)) if self.requests else None
        if not self.checked or self.narrowed or self.queued or (not bad and request == self.request):
            return self
        kept = self.pool.driver_groups
        if bad:
            keys = {f.group.key for f in bad if f.group is not None}
            kept = tuple(g for g in kept if g.key not in keys)
        fitting_now = max((g.max_free_per_node for g in kept), default=0) if bad else None
        counted = _offer_checked(self.pool, self.display_name, self.cap, self.pool.pinnable, fitting_now,
                                 request, kept if bad else None, refusal=self.taint_refusal)
        return replace(counted, cuda=self.cuda, cuda_free=sum(g.free for g in kept) if bad else None,
                       limit_note=self.limit_note, requests=self.requests)

    @property
    def available(self) -> bool:
        return self.max_gpus > 0

    def needs_scale_up(self, gpus: int) -> bool:
        return self.checked and gpus > self.now


@dataclass(frozen=True)
class ProfileOffer:
    spec: GPUProfileSpec
    pools: tuple[PoolOffer, ...]  # visible pools of this profile, in order
    problem: str | None = None  # capacity unknown (see capacity_problem)
    count_limit: int | None = None  # the hub's bound on GPUs per server (gpu_max_per_server)

    @property
    def cap(self) -> int | None:
        """The most GPUs one server of this profile may ask for, whatever is free: the
        profile's ``max_gpus`` and the hub's ``count_limit``, the lower (None: no bound)."""
        return _lowest_cap(self.spec.max_gpus, self.count_limit)

    def pool(self, pool_id: str) -> PoolOffer | None:
        return next((p for p in self.pools if p.pool.id == pool_id), None)

    @property
    def usable(self) -> tuple[PoolOffer, ...]:
        return tuple(p for p in self.pools if p.available)

    @property
    def max_gpus(self) -> int:
        return max((p.max_gpus for p in self.pools), default=0)

    def for_image(self, image_key: str | None) -> ProfileOffer:
        """The offer as the pod of ``image_key`` sees it (:meth:`PoolOffer.for_image`)."""
        pools = tuple(p.for_image(image_key) for p in self.pools)
        if all(a is b for a, b in zip(pools, self.pools)):
            return self
        return replace(self, pools=pools)

    def groups(self) -> list[tuple[str, tuple[PoolOffer, ...]]]:
        """The pools as the page shows them: grouped by GPU model, whole GPUs first, then MIG slices,
        then shares; the groups with room before the others, and in a group the pools with room
        first; otherwise the admin's order (``gpu_pool_rules``)."""
        kinds = {"GPU": (0, ""), "slice": (1, ", MIG slices"), "share": (2, ", shared")}
        found: dict[tuple[int, str], list[tuple[int, PoolOffer]]] = {}
        for i, p in enumerate(self.pools):
            rank, suffix = kinds[p.words.unit]
            found.setdefault((rank, p.model + suffix), []).append((i, p))
        ordered = sorted(found.items(), key=lambda kv: (kv[0][0], not any(p.available for _, p in kv[1]),
                                                         kv[1][0][0]))
        return [(title, tuple(p for _, p in sorted(members, key=lambda ip: (not ip[1].available, ip[0]))))
                for (_, title), members in ordered]

    def default_pool(
        self, gpus: int = 1, accept: Callable[[PoolOffer], bool] | None = None
    ) -> PoolOffer | None:
        """The first pool (admin's order) that gives ``gpus`` now, else the
        first that gives them after a scale-up; only pools ``accept`` takes."""
        fits = [p for p in self.pools if p.max_gpus >= gpus and (accept is None or accept(p))]
        return next((p for p in fits if not p.needs_scale_up(gpus)), None) or next(
            iter(fits), None
        )


    def preferred_pool(self, gpus: int = 1, image_key: str | None = None) -> PoolOffer | None:
        """:meth:`default_pool` for an image: a pool whose drivers fit it
        best (fits, then fits with a caveat, then driver unknown), else any
        pool with room (a spawn there is refused with the CUDA reason)."""

        def rank(p: PoolOffer) -> int:
            fit = p.fit(image_key)
            return 0 if fit is None else {"ok": 0, "warn": 1, "skip": 2}.get(fit.level, 3)

        for worst in (0, 1, 2, 3):
            found = self.default_pool(gpus, accept=lambda p, w=worst: rank(p) <= w)
            if found is not None:
                return found
        return None


def _scale_up_gpus(pool: PoolView) -> int:
    su = pool.scale_up
    if su is None or pool.nodes >= su.max_nodes:
        return 0
    return su.gpus_per_node


#: Why a server gets one share of a time-sliced GPU (``gpu_allow_multiple_shares`` lifts it)
ONE_SHARE_NOTE = (
    "a time-sliced GPU gives one share per server: more shares of one GPU add no memory and "
    "little speed, since every share sees the whole GPU"
)


def share_cap(pool: PoolView, multiple_shares: bool) -> int | None:
    """The most shares one server may take of ``pool``: 1 on a time-sliced GPU unless the admin
    allows more (several replicas of one time-sliced GPU are the same GPU, with no more memory:
    the device plugin's own ``failRequestsGreaterThanOne`` refuses them too); else no bound."""
    if pool.shared and pool.sharing == "time-slicing" and not multiple_shares:
        return 1
    return None


def _lowest_cap(*caps: int | None) -> int | None:
    given = [c for c in caps if c is not None]
    return min(given) if given else None


def never_fits(pool: PoolView, request: tuple[int, ...] | None, fitting: FitCount | None = None) -> str | None:
    """Why no node of ``pool`` can ever hold a server asking ``request`` of its node (``T4 nodes have
    3.9 CPUs; this server needs 8``), or None when some can (or the pool has no node to judge by,
    or the request is not counted)."""
    fitting = fitting if fitting is not None else pool.fit_for(request)
    if fitting is None or pool.nodes <= 0 or fitting.holding > 0 or pool.largest is None or request is None:
        return None
    return shortfall_words(request, pool.largest, nodes_name(pool))


def _offer_checked(
    pool: PoolView, name: str, cap: int | None, pinnable: bool, fitting_now: int | None = None,
    request: tuple[int, ...] | None = None, groups: tuple[DriverGroup, ...] | None = None,
    refusal: str | None = None,
) -> PoolOffer:
    """What the pool gives one server; ``fitting_now``: the most free on one
    node an image's CUDA lets the pod land on (``groups``: those nodes' driver
    groups), else the pool's own maximum. ``request``: what the server asks of
    its node besides GPUs; only nodes where it fits now count (NodeResourcesFit).
    ``refusal``: why a taint keeps every server off the pool's nodes (``taints.refused_by_taint``)."""
    now = pool.max_free_per_node if fitting_now is None else fitting_now
    fitting = pool.fit_for(request, groups)
    never = never_fits(pool, request, fitting)
    if fitting is not None:
        now = min(now, fitting.max_free_per_node)
    later = 0 if never else _scale_up_gpus(pool)
    limit = max(now, later)
    if cap is not None:
        limit, now = min(limit, cap), min(now, cap)
    reason = None
    if not pinnable:
        limit = now = 0
        reason = "its nodes carry no labels a server could be kept inside the pool with"
    elif limit <= 0 and refusal:
        reason = refusal
    elif never:
        limit = now = 0
        reason = never
    elif limit <= 0 and fitting_now is not None:
        reason = "no GPU is free on the nodes whose driver fits this image"
        if pool.scale_up is not None:
            reason += f" and the pool is at its maximum of {pool.scale_up.max_nodes} nodes"
    elif limit <= 0 and fitting is not None and pool.free > 0:
        reason = (f"no node with a free GPU has room for this server now ({request_words(request)}); "
                  f"{fitting.free} free on nodes where it fits")
    elif limit <= 0:
        if pool.total == 0:
            reason = "no GPUs are allocatable in this pool now"
        else:
            reason = f"all {pool.total} GPUs are in use" if pool.total > 1 else "its only GPU is in use"
            if pool.scale_up is not None:
                reason += f" and the pool is at its maximum of {pool.scale_up.max_nodes} nodes"
    return PoolOffer(
        pool=pool,
        display_name=name,
        max_gpus=max(limit, 0),
        now=max(now, 0),
        scale_up_minutes=pool.scale_up.minutes if pool.scale_up and limit > now else None,
        reason=reason,
        cap=cap,
        request=request if fitting is not None else None,
        fit_free=fitting.free if fitting is not None else None,
        fit_most=fitting.max_free_per_node if fitting is not None else None,
        never=never,
        taint_refusal=refusal if limit <= 0 else None,
    )


def _offer_unchecked(pool: PoolView, name: str, cap: int | None, pinnable: bool) -> PoolOffer:
    """Capacity unknown and the admin admits spawns anyway: the size of the
    pool's biggest node (or of a new node) bounds the count, not what is free."""
    per_node = pool.total // pool.nodes if pool.nodes > 0 else 0
    biggest = max(pool.max_allocatable, _scale_up_gpus(pool), per_node, pool.max_free_per_node)
    if biggest <= 0:
        limit = cap or 1
    else:
        limit = biggest if cap is None else min(biggest, cap)
    if not pinnable:
        return PoolOffer(pool, name, 0, 0, None, "its nodes carry no labels to keep a server inside it", False)
    return PoolOffer(pool, name, max(limit, 0), max(limit, 0), None, None, False)


def build_offers(
    specs: Sequence[GPUProfileSpec],
    snapshot: CapacitySnapshot | None,
    rules: Sequence[PoolRule] = (),
    *,
    admit_without_capacity: bool = False,
    fit: Callable[[ImageCuda, PoolView], PoolFit] | None = None,
    count_limit: int | None = None,
    multiple_shares: bool = False,
    requests: Mapping[str, Mapping[str | None, tuple[int, ...]]] | None = None,
    tolerated_taint_keys: Sequence[str] = DEFAULT_TOLERATED_TAINT_KEYS,
) -> dict[str, ProfileOffer]:
    """One :class:`ProfileOffer` per GPU profile slug, in the specs' order.

    When capacity is unknown (:func:`capacity_problem`), a profile offers no
    pool unless ``admit_without_capacity``; then it offers the pools the last
    snapshot still lists, without a free-count check. ``fit`` (the spawner's
    CUDA check, see :func:`gpuspawner.spawn.cuda_fit.pool_fit`) judges each image
    of a profile that declares CUDA on each of its pools. ``count_limit``
    bounds the GPUs one server may ask for (with each profile's ``max_gpus``); a time-sliced
    pool gives one share per server unless ``multiple_shares`` (:func:`share_cap`). ``requests``:
    per profile slug, what each image's pod asks of its node (``resource_requests.profile_requests``); a
    pool then counts only the nodes where the default image's pod fits, and
    :meth:`ProfileOffer.for_image` recounts for another image. ``tolerated_taint_keys``
    (``gpu_tolerated_taint_keys``): a pool whose nodes all carry a hard taint outside them gives
    no GPU, and its offer says which taint and how to allow it.
    """
    if count_limit is not None and (isinstance(count_limit, bool) or not isinstance(count_limit, int)
                                    or count_limit < 1):
        raise ValueError(f"count_limit must be a positive integer or None, not {count_limit!r}")
    problem = capacity_problem(snapshot)
    visible = present_pools(snapshot.pools if snapshot else (), rules)
    offers: dict[str, ProfileOffer] = {}
    for spec in specs:
        pools: list[PoolOffer] = []
        if problem is None or admit_without_capacity:
            cap = _lowest_cap(spec.max_gpus, count_limit)
            own = (requests or {}).get(spec.slug) or {}
            for pool, name in visible:
                if spec.admits(pool.id):
                    shares = share_cap(pool, multiple_shares)
                    refusal = refused_by_taint(pool, tolerated_taint_keys) if problem is None else None
                    if problem is None and own:
                        offer = _offer_checked(pool, name, _lowest_cap(cap, shares), pool.pinnable,
                                               request=own.get(spec.images.key_for({}), own.get(None)),
                                               refusal=refusal)
                        offer = replace(offer, requests=own)
                    elif problem is None:
                        offer = _offer_checked(pool, name, _lowest_cap(cap, shares), pool.pinnable, refusal=refusal)
                    else:
                        offer = _offer_unchecked(pool, name, _lowest_cap(cap, shares), pool.pinnable)
                    if shares is not None and (cap is None or shares < cap):
                        offer = replace(offer, limit_note=ONE_SHARE_NOTE)
                    if fit is not None and spec.images.declared:
                        offer = replace(
                            offer, cuda={k: fit(img, pool) for k, img in spec.images.images.items()}
                        )
                    pools.append(offer)
        offers[spec.slug] = ProfileOffer(spec=spec, pools=tuple(pools), problem=problem, count_limit=count_limit)
    return offers


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def describe_pool(offer: PoolOffer) -> str:
    """One line for a ``<select>`` choice (the stock KubeSpawner form)."""
    pool = offer.pool
    if not offer.checked:
        return f"{offer.display_name}: free GPUs unknown"
    text = f"{offer.display_name}: {pool.free} of {pool.total} GPUs free"
    if offer.cuda_free is not None:
        text += f" ({offer.cuda_free} on nodes whose driver fits this image)"
    if offer.reason:
        return f"{text}, unavailable: {offer.reason}"
    text += f", up to {offer.max_gpus} per server"
    if offer.scale_up_minutes is not None:
        text += f" (more than {offer.now} after a scale-up, ~{offer.scale_up_minutes:g} min)"
    own = offer.cuda.get("") if len(offer.cuda) == 1 else None
    if own is not None and own.summary:
        text += f"; CUDA: {own.summary}"
    return text


def gpu_profile_entry(offer: ProfileOffer) -> dict[str, Any]:
    """The KubeSpawner ``profile_list`` item for one GPU profile."""
    spec = offer.spec
    # the select choices are static: count for the image the profile starts with
    # (its default image choice); validation recounts for the image chosen
    offer = offer.for_image(spec.images.key_for({}))
    description = spec.description
    if offer.problem:
        description = f"{description} ({offer.problem})" if description else offer.problem
    elif not offer.usable:
        note = "No GPUs can be had in this profile's pools right now."
        description = f"{description} {note}".strip()
    pool_choices: dict[str, Any] = {}
    default = offer.default_pool()
    for p in offer.usable:
        pool_choices[p.pool.id] = {
            "display_name": describe_pool(p),
            "default": p is default,
        }
    count_choices = {
        str(n): {"display_name": _plural(n, "GPU"), "default": n == 1}
        for n in range(1, offer.max_gpus + 1)
    }
    options: dict[str, Any] = {
        GPU_POOL_OPTION: {"display_name": "GPU pool", "choices": pool_choices},
        GPU_COUNT_OPTION: {"display_name": "GPUs", "choices": count_choices},
    }
    for name, option in spec.profile_options.items():
        options[name] = option
    entry: dict[str, Any] = {
        "display_name": spec.display_name,
        "slug": spec.slug,
        "description": description,
        "kubespawner_override": dict(spec.kubespawner_override),
        "profile_options": options,
    }
    if spec.default:
        entry["default"] = True
    return entry


def merge_profiles(
    static: Sequence[Mapping[str, Any]], offers: Mapping[str, ProfileOffer]
) -> tuple[list[dict[str, Any]], list[str]]:
    """The admin's static profiles, then the GPU profiles.

    Returns the list and the slugs of static profiles dropped because a GPU
    profile has the same slug (the caller logs them: a slug must be unique).
    """
    gpu = [gpu_profile_entry(o) for o in offers.values()]
    gpu_slugs = {e["slug"] for e in gpu}
    merged, shadowed = [], []
    for p in static:
        if p.get("slug") in gpu_slugs:
            shadowed.append(p["slug"])
            continue
        merged.append(dict(p))
    return merged + gpu, shadowed
