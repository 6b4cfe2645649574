"""The spawn page: the GPU offers and the forms rendered from them, kept in one bounded cache and renewed in the background."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Any, Callable, Generic, Hashable, TypeVar

from jupyterhub.utils import maybe_future

from gpuspawner.hub import capacity_access, kueue_wait, scale_up_timeout, gpu_hours_page, user_quota
from gpuspawner.hub import poolimages
from gpuspawner.hub.settings import fingerprint
from gpuspawner.hub.templates import render_form as render_template
from gpuspawner.queue.pools import full_card_text, queue_offers, queued_pool_ids
from gpuspawner.spawn import cuda_fit
from gpuspawner.spawn.access import UserOffers, offers_for, principal_of
from gpuspawner.spawn.options import OptionError, validate_user_options
from gpuspawner.spawn.profiles import ProfileOffer, build_offers, capacity_problem, merge_profiles

__all__ = ["PageCache", "PAGE_CACHE", "capacity_snapshot", "offers", "offer_view", "render_page", "render_form"]

T = TypeVar("T")


class PageCache(Generic[T]):
    """Results, each under the object it was built from (its source: compared by identity, and
    held, so its identity is not reused) and a hashable key: at most ``size`` of them, from at
    most ``sources`` sources, the least recently used going first. A source's results go with
    it: once the counts are renewed, the offers and forms built from the ones before are
    garbage instead of memory (a form is kilobytes of text) and objects every full collection
    walks."""

    def __init__(self, size: int = 8, sources: int | None = None) -> None:
        if size < 1:
            raise ValueError(f"size must be at least 1, not {size!r}")
        sources = size if sources is None else sources
        if sources < 1:
            raise ValueError(f"sources must be at least 1, not {sources!r}")
        self.size = size
        self.sources = sources
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[tuple[int, Hashable], T] = OrderedDict()
        # id -> (the source, the keys of its entries), least recently used first
        self._sources: OrderedDict[int, tuple[Any, set[Hashable]]] = OrderedDict()

    def get(self, source: Any, key: Hashable, build: Callable[[], T]) -> T:
        """The result for (``source``, ``key``), built by ``build()`` the first time."""
        held = self._sources.get(id(source))
        if held is not None and held[0] is source:
            self._sources.move_to_end(id(source))
            slot = (id(source), key)
            if slot in self._entries:
                self._entries.move_to_end(slot)
                self.hits += 1
                return self._entries[slot]
        self.misses += 1
        value = build()
        held = self._sources.get(id(source))  # build() may have used the cache itself
        if held is None or held[0] is not source:
            if held is not None:  # an object gone, its id reused: what was built from it goes
                self._drop(id(source))
            held = self._sources[id(source)] = (source, set())
        self._sources.move_to_end(id(source))
        held[1].add(key)
        self._entries[(id(source), key)] = value
        self._entries.move_to_end((id(source), key))
        while len(self._sources) > self.sources:
            self._drop(next(iter(self._sources)))
        while len(self._entries) > self.size:
            (source_id, old), _ = self._entries.popitem(last=False)
            keys = self._sources[source_id][1]
            keys.discard(old)
            if not keys:
                del self._sources[source_id]
        return value

    def _drop(self, source_id: int) -> None:
        _, keys = self._sources.pop(source_id)
        for key in keys:
            del self._entries[(source_id, key)]


# this hub process's offers (under a snapshot's pools and the parsed configuration) and the forms
# rendered from them (under the offers and what the user sees), least recently used first out:
# forms for up to 256 kinds of user, and 8 sources (the page's counts and offers, renewed every
# gpu_capacity_page_max_age / 2 while views come, and those of the last spawns' checks)
PAGE_CACHE: PageCache = PageCache(size=264, sources=8)
_renewals: set[asyncio.Task] = set()  # the page renewal under way on this hub's loop (at most one)
_logged_check_errors: set[str] = set()
_cuda_verdicts = cuda_fit.VerdictMemo()  # this hub process's CUDA verdicts, per image and driver group


async def capacity_snapshot(spawner: Any, max_age: float = 0.0, renew: bool = False) -> Any:
    """The cache's snapshot (waiting for its first sync at most ``gpu_capacity_sync_timeout``), or
    None when there is no cache. ``max_age``: counts that old will do; ``renew``: count anew and
    hold those for the page (``CapacityCache.snapshot``)."""
    cache = spawner.capacity_cache()
    if cache is None:
        return None
    try:
        await cache.wait_synced(spawner.gpu_capacity_sync_timeout)
        # count where each profile's server fits (CPU, memory): a no-op unless the set changed
        cache.track_requests(spawner.spawn_config().tracked)
        scale_up_timeout.warn_slow_pools(spawner)
        snapshot = cache.snapshot(max_age, renew=renew)
    except asyncio.CancelledError:
        raise
    except Exception as e:
        capacity_access.log_problem(spawner, f"the GPU capacity cache could not start: {e}")
        return None
    problem = capacity_problem(snapshot)
    if problem:
        capacity_access.log_problem(spawner, problem)
    return snapshot


async def static_profiles(spawner: Any) -> list[dict[str, Any]]:
    static = spawner._sorted_dict_values(spawner.profile_list)
    if callable(static):
        static = await maybe_future(static(spawner))
    return static or []


async def offers(spawner: Any, max_age: float = 0.0, renew: bool = False) -> dict[str, ProfileOffer]:
    """Every GPU profile's offer (all users'), from counts at most ``max_age`` seconds old (``renew``:
    counted anew for the page); built once per snapshot and configuration in this hub process."""
    if not spawner.gpu_profiles:
        return {}
    snapshot = await capacity_snapshot(spawner, max_age, renew)
    config = spawner.spawn_config()
    # a snapshot's pools are one object until a count changes; its problem text (which
    # carries the figures' age when they are stale) is part of what the offers say
    source = snapshot.pools if snapshot is not None else None
    spawner.kueue_view()  # queued pools: the page's queue figures come from it (hub/kueue_wait.py)
    return PAGE_CACHE.get(source, ("offers", config.key, capacity_problem(snapshot)), lambda: queue_offers(build_offers(
        config.specs,
        snapshot,
        config.pool_rules,
        admit_without_capacity=spawner.gpu_admit_without_capacity,
        fit=_fit(spawner),
        count_limit=spawner.gpu_max_per_server,
        multiple_shares=spawner.gpu_allow_multiple_shares,
        requests=config.requests,
        tolerated_taint_keys=tuple(spawner.gpu_tolerated_taint_keys),
    ), config.queue_rules))


def _fit(spawner: Any) -> Callable[[Any, Any], cuda_fit.PoolFit]:
    policy, check, log = spawner.cuda_policy, spawner.cuda_check, spawner.log

    def fit(image: Any, pool: Any) -> cuda_fit.PoolFit:
        """How ``image`` fits ``pool``, judged once per driver group and remembered. A broken
        ``cuda_check`` gives "unknown" (never a refusal) and is logged once per distinct error."""
        result = cuda_fit.pool_fit(image, pool, policy, check, _cuda_verdicts)
        for g in result.groups:
            if g.verdict.rule == "check-error" and g.verdict.reason not in _logged_check_errors:
                _logged_check_errors.add(g.verdict.reason)
                log.error("c.GPUSpawner.cuda_check failed on the nodes of pool %s with driver %s: %s "
                          "Servers start unchecked until it is fixed.", pool.id, g.driver, g.verdict.reason)
        return result

    return fit


def user_view(spawner: Any, static: list[dict[str, Any]],
              gpu_offers: dict[str, ProfileOffer]) -> tuple[list[dict[str, Any]], UserOffers]:
    """KubeSpawner's initialized profile list (static then GPU) and the offers this user may use."""
    view = offers_for(principal_of(spawner.user), gpu_offers, spawner.spawn_config().access_rules)
    merged, shadowed = merge_profiles(view.drop_hidden(static), view.offers)
    if shadowed:
        spawner.log.error("profile_list slugs %s are shadowed by gpu_profiles with the same slug", shadowed)
    return spawner._get_initialized_profile_list(merged), view


async def offer_view(spawner: Any, max_age: float = 0.0) -> tuple[list[dict[str, Any]], UserOffers]:
    """The initialized profile list and the GPU offers as this server's user sees them, from
    counts at most ``max_age`` seconds old (0: the current counts)."""
    static = await static_profiles(spawner)
    return user_view(spawner, static, await offers(spawner, max_age))


async def render_page(spawner: Any) -> str:
    """The spawn form (GPUSpawner's ``options_form``), from counts at most
    ``gpu_capacity_page_max_age`` old; past half that age the counts are renewed after this
    view, in the background, so the views after it do not wait for the rebuild."""
    max_age = spawner.gpu_capacity_page_max_age
    static = await static_profiles(spawner)
    cull_rules = spawner.cull_rules()
    who = principal_of(spawner.user)
    key = (
        # what the access rules read of a user (spawn.access): users alike share a form; the
        # rules themselves come from the parsed configuration, part of the offers' key
        who.groups,
        who.admin,
        fingerprint(static, spawner.user_options or {}, spawner._spawn.form_choices, _quota_key(spawner, static),
                    repr(cull_rules), spawner.profile_form_template,
                    spawner.additional_profile_form_template_paths, sorted(admin_option_keys(spawner)),
                    poolimages.counts_version(spawner)),
    )
    gpu_offers = await offers(spawner, max_age)
    html = kueue_wait.stop_notice(spawner) + _form(spawner, gpu_offers, key, static, cull_rules)
    loop = asyncio.get_running_loop()
    renewing = any(t.get_loop() is loop and not t.done() for t in _renewals)
    if max_age > 0 and not renewing:
        cache = spawner.capacity_cache()
        age = cache.held_age() if cache is not None else None
        if age is not None and age >= max_age / 2:
            task = asyncio.ensure_future(_renew(spawner, max_age, key, static, cull_rules))
            _renewals.add(task)
            task.add_done_callback(_renewals.discard)
    return gpu_hours_page.spawn_banner(spawner, gpu_offers) + html  # the user's own GPU-hours, above the form


def _form(spawner: Any, gpu_offers: dict[str, ProfileOffer], key: Any, static: list[dict[str, Any]],
          cull_rules: Any) -> str:
    def render() -> str:
        profile_list, view = user_view(spawner, static, gpu_offers)
        return render_form(spawner, profile_list, view.offers, initialized=True, cull_rules=cull_rules)

    return PAGE_CACHE.get(gpu_offers, ("form", key), render)


async def _renew(spawner: Any, max_age: float, key: Any, static: list[dict[str, Any]], cull_rules: Any) -> None:
    """Count anew, build the offers and render the form of the view that asked, once that view's
    answer is on its way (the same work a later view would do, done between requests)."""
    await asyncio.sleep(0)  # the view's own handler finishes its response first
    try:
        _form(spawner, await offers(spawner, max_age, renew=True), key, static, cull_rules)
    except Exception as e:  # never a crash: the next view rebuilds inline
        spawner.log.warning("Renewing the spawn page's GPU offers failed: %s: %s", type(e).__name__, e)


def _quota_key(spawner: Any, static: list[dict[str, Any]]) -> Any:
    try:
        return user_quota.quota_view(spawner, static)
    except Exception:
        return None


def admin_option_keys(spawner: Any) -> tuple[str, ...]:
    """JupyterHub 5.3+: a dict ``apply_user_options`` names the option keys the admin maps onto
    spawner traits on purpose (jupyterhub/spawner.py)."""
    hook = getattr(spawner, "apply_user_options", None)
    return tuple(hook) if isinstance(hook, dict) else ()


def render_form(spawner: Any, profile_list: Any, gpu_offers: Any = None, initialized: bool = False,
                cull_rules: Any = None) -> str:
    """KubeSpawner's form, with Jinja2 autoescaping on (node labels and admin strings reach the
    page) and the GPU offers in the context. ``initialized``: ``profile_list`` is already
    KubeSpawner's initialized copy, so it is not deep-copied a second time on every view."""
    if not initialized:
        profile_list = spawner._get_initialized_profile_list(profile_list)
    gpu_offers = gpu_offers or {}
    user_options = dict(spawner.user_options or {})
    if user_options:
        try:
            validate_user_options(user_options, profile_list, gpu_offers, trait_names=spawner.trait_names(),
                                  admin_keys=admin_option_keys(spawner))
        except OptionError as e:
            spawner.log.info("Not pre-selecting saved user options on the spawn form: %s", e)
            user_options = {}
    if not user_options and spawner._spawn.form_choices:
        # a refused request's choices: shown again as chosen, whatever made them refused (the
        # form marks a pool that cannot be had; nothing of them is trusted beyond comparison)
        user_options = dict(spawner._spawn.form_choices)
    try:
        quota = user_quota.quota_view(spawner, profile_list)
    except Exception as e:  # no user (a bare spawner in a script): no quota line
        spawner.log.debug("No GPU quota on the spawn form: %s", e)
        quota = None
    return render_template(
        spawner.additional_profile_form_template_paths,
        spawner.profile_form_template,
        profile_list=profile_list,
        user_options=user_options,
        gpu_offers=gpu_offers,
        gpu_quota=quota,  # (may hold, held by the user's other servers), or None: the count menu stays within it
        cull_rules=cull_rules if cull_rules is not None else spawner.cull_rules(),  # the idle rule per profile and pool
        idle_rule=spawner.idle_rule,
        # gpu_kueue_queues: (profile, pool) -> LocalQueue; a full queued card says so (queue/pools.py)
        gpu_queues=queued_pool_ids(gpu_offers, spawner.spawn_config().queue_rules),
        full_card_text=full_card_text,
        image_ready=poolimages.ready_words(spawner),  # "Image ready on 3 of 5 nodes" (hub/poolimages.py)
        # where the form's script and style are (files the browser keeps: hub/form_assets.py)
        hub_prefix=getattr(spawner.hub, "base_url", None) or "/hub/",
    )
