"""``GPUSpawner``: KubeSpawner plus GPU profiles built from live cluster capacity.

Hub glue only: the rules live in ``profiles`` (what is offered), ``options``
(what a request may ask for) and ``overrides`` (what the pod gets); the
capacity knobs in ``settings``; the numbers come from the shared
``CapacityCache`` (list + watch of nodes and pods), so neither the spawn page
nor a spawn makes a Kubernetes API call to decide what is free.  The errors a
spawn ends with are built in ``errors``, the pending pod's verdicts in
``pending``, the form in ``templates``.

KubeSpawner 7.1 seams used (kubespawner/spawner.py): ``load_user_options``
(called first thing in ``_start``, before any Kubernetes object is created),
``_load_profile`` (applies a profile's ``kubespawner_override`` and its
options' choices), ``_render_options_form`` and the ``options_form`` default.

While a GPU server starts, ``progress`` shows the pod's Kubernetes events in
GPU words (``gpuspawner.spawn.progress``), and ``is_pod_running``, which
KubeSpawner's ``_start`` polls until the pod runs, ends the wait early when
the pod can never start.  Spawn outcomes and the wait for a GPU are counted
in ``gpuspawner.hub.metrics`` (docs/metrics.md).

``GPUSpawnerSettings`` is re-exported here: admins import both classes from
``gpuspawner.hub.spawner``.
"""

from __future__ import annotations

import asyncio
import copy
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from jupyterhub.utils import maybe_future
from tornado.log import app_log, gen_log
from kubespawner import KubeSpawner
from traitlets import Any as AnyTrait
from traitlets import Bool, Dict, Float, Integer, List, TraitError, Unicode, default, validate

from gpuspawner.spawn import cudafit
from gpuspawner.hub import dra as dra_glue
from gpuspawner.hub import queue as queue_glue
from gpuspawner.hub import metrics
from gpuspawner.hub import usage as gpu_hours
from gpuspawner.hub import usagepage
from gpuspawner.spawn.access import AccessError, UserOffers, check_access, offers_for, principal_of
from gpuspawner.cuda import POLICIES, decide
from gpuspawner.cuda.custom import resolve_check
from gpuspawner.hub import leftpod, logfilter, reaper
from gpuspawner.hub import serverfit, startwait
from gpuspawner.hub.formchoices import form_choices
from gpuspawner.hub.errors import GPUSpawnFailure, Refusal, refusal, spawn_error
from gpuspawner.spawn.options import OTHER as REFUSED_OTHER
from gpuspawner.spawn.options import (
    STATIC_REASONS,
    CudaRefusal,
    OptionError,
    Selection,
    names,
    validate_user_options,
)
from gpuspawner.spawn.optionsource import dropped_query_names, options_from_form, options_from_query
from gpuspawner.spawn.overrides import build_overrides
from gpuspawner.spawn.taints import untolerated_taints
from gpuspawner.spawn.pending import (
    GPUS_ANNOTATION,
    POOL_ANNOTATION,
    fatal_verdict,
    no_room_verdict,
    queued_before,
    scheduling_failure,
    short_of_gpus,
)
from gpuspawner.spawn.profiles import GPU_OPTIONS, ProfileOffer, build_offers, capacity_problem, merge_profiles
from gpuspawner.spawn.quota import OtherServer, QuotaPolicy, check_quota, held_servers
from gpuspawner.spawn.probe import PROBE_CONTAINER, probe_container, probe_failure
from gpuspawner.spawn.progress import SpawnContext, rewrite_progress_event
from gpuspawner.hub.pagememo import Memo, fingerprint
from gpuspawner.hub.reaper import OrphanPodSettings
from gpuspawner.hub.settings import GPUSpawnerSettings
from gpuspawner.hub.templates import render_form, template_dirs
from gpuspawner.kube.apierrors import rules_text
from gpuspawner.queue.pools import full_card_text, queue_offers, queued_pool_ids

__all__ = ["GPUSpawnerSettings", "GPUSpawner", "applied_in_load_user_options"]

_clock = time.monotonic  # how long a start ran (a seam for tests)

# the largest gpu_max_per_server accepted: every count up to it is a choice on the spawn form
GPU_COUNT_LIMIT_MAX = 1024


def applied_in_load_user_options(spawner, user_options) -> None:
    """GPUSpawner's default ``apply_user_options``: nothing is applied here.

    JupyterHub (5.3+) calls ``Spawner.apply_user_options`` before ``start``
    and logs "Received unhandled user_options" when it is unset
    (jupyterhub/spawner.py ``_run_apply_user_options``).  GPUSpawner validates
    and applies user options (``profile``, ``gpu_pool``, ``gpus`` and the
    profile's options) in ``load_user_options``, KubeSpawner's seam, which
    ``start`` calls with the capacity of that moment; applying them here as
    well would apply them twice.  An admin's own ``apply_user_options``
    (a callable, or a dict of option name -> trait) replaces this default and
    runs as JupyterHub documents, before ``load_user_options``.
    """
    return None


@dataclass(frozen=True)
class GPUSpawnInfo:
    """The pool a GPU spawn was pinned to, for its progress and metrics."""

    pool_id: str
    pool_name: str
    resource: str
    gpus: int
    checked: bool = True  # admitted on counted capacity (not gpu_admit_without_capacity)
    product: str | None = None  # the pool's GPU product (the GPU-hour ledger's weights)
    request: tuple[int, ...] | None = None  # CPU, memory, disk, pods the pod asks (serverreq)


class GPUSpawner(KubeSpawner, GPUSpawnerSettings, OrphanPodSettings):
    """KubeSpawner with GPU profiles whose pools come from live capacity."""

    gpu_admit_without_capacity = Bool(
        False,
        config=True,
        help="""
        When GPU capacity is unknown (the cache has not synced, lost its watch,
        or lacks cluster-wide read rights), refuse GPU spawns with a 503
        (False, the default) or admit them to the pools last seen without
        checking what is free (True): the scheduler then decides, and a pod
        may wait Pending.

            c.GPUSpawner.gpu_admit_without_capacity = True
        """,
    )
    gpu_full_pool_grace = Float(
        30.0,
        config=True,
        help="""
        Seconds a GPU server's pod may wait when the scheduler finds no room for
        its GPUs (``Insufficient nvidia.com/gpu``) although it was admitted on
        counts that had room (they were out of date, or another workload took
        the GPUs meanwhile). The hub then re-lists the cluster, and when no node
        of the pool has the GPUs and the pool cannot add nodes, the spawn fails
        with a message that says so instead of waiting out ``start_timeout``.
        The default covers Kubernetes' default termination grace period (30 s),
        so GPUs held by pods that are shutting down are waited for.

            c.GPUSpawner.gpu_full_pool_grace = 60
        """,
    )
    gpu_capacity_sync_timeout = Float(
        5.0,
        config=True,
        help="""
        Seconds the spawn page and a spawn wait for the capacity cache's first
        sync before treating capacity as unknown. Keep it below
        ``c.JupyterHub.slow_spawn_timeout`` (10 s), so a refused REST spawn is
        answered with its 4xx/5xx rather than a 202 and a later failure.

            c.GPUSpawner.gpu_capacity_sync_timeout = 5
        """,
    )

    gpu_capacity_page_max_age = Float(
        2.0,
        config=True,
        help="""
        How old (seconds) the GPU counts on the spawn page may be. On a big
        cluster the counts change many times a second; the page then builds
        its offers (pools, counts, CUDA fit) once per interval for all users
        and serves a rendered form again while nothing on it changed,
        instead of rebuilding both on every view. A view past half the
        interval has both renewed in the background after its answer, so the
        views after it do not wait for the rebuild. The page's live refresh and
        ``GET /hub/api/gpus`` always show the current counts, and a spawn is
        always checked against them. 0 builds the offers on every view.

            c.GPUSpawner.gpu_capacity_page_max_age = 2
        """,
    )

    cuda_policy = Unicode(
        "minor",
        config=True,
        help="""
        How strictly an image's CUDA must fit a node's NVIDIA driver
        (docs/cuda-compatibility.md): ``strict`` accepts only backward
        compatibility (driver CUDA >= image CUDA); ``minor`` (the default) also
        minor-version compatibility, with a warning in the spawn progress;
        ``forward`` also the image's cuda-compat package on data-center GPUs.

            c.GPUSpawner.cuda_policy = "strict"
        """,
    )
    cuda_check = AnyTrait(
        decide,
        config=True,
        help="""
        The CUDA compatibility decision: a callable ``(ImageCuda, NodeCuda,
        policy) -> Verdict`` (see ``gpuspawner.cuda``), or its import string.
        The default is ``gpuspawner.cuda.decide``. It is called once per image
        and distinct driver of each pool a profile offers (nodes with the same
        driver, CUDA and compute capability share one verdict; ``node.name``
        is None), and its verdicts are remembered for the life of the hub, so
        it must decide from the driver facts alone.

            from gpuspawner.cuda import decide, Facts
            facts = Facts(enforce_require=True)
            c.GPUSpawner.cuda_check = lambda image, node, policy: decide(image, node, policy, facts)
            # or: c.GPUSpawner.cuda_check = "mysite.cuda:check"
        """,
    )
    cuda_probe = Bool(
        False,
        config=True,
        help="""
        Before a GPU server starts, run ``gpuspawner probe`` in an init container
        with the same GPUs: it confirms on the node that the driver is visible,
        that the GPUs the server asked for are there and that the driver fits
        the image. A failure is the spawn error the user sees.

            c.GPUSpawner.cuda_probe = True
        """,
    )
    cuda_probe_image = Unicode(
        None,
        allow_none=True,
        config=True,
        help="""
        The image of the probe init container; it must have gpuspawner (and
        nvidia-ml-py) installed. None (the default) uses the server's own image.

            c.GPUSpawner.cuda_probe_image = "ghcr.io/example/gpuspawner-probe:1.0"
        """,
    )

    gpu_quota = Integer(
        None,
        allow_none=True,
        config=True,
        help="""
        The most GPUs one user may hold at once across all their servers
        (named servers included), counting running and starting servers.
        None (the default) is no limit. A spawn that would go over it is
        refused with 403 and a message saying what the user holds. Groups
        can be given their own limit with ``gpu_quota_by_group``; admins have
        none unless ``gpu_quota_admin`` is set.

            c.GPUSpawner.gpu_quota = 2
        """,
    )
    gpu_quota_by_group = Dict(
        config=True,
        help="""
        Per-group GPU quotas that replace ``gpu_quota`` for members of a
        JupyterHub group: ``{group: GPUs}``, None for no limit. A user in
        several listed groups gets the most generous of them.

            c.GPUSpawner.gpu_quota_by_group = {"research": 8, "students": 1, "staff": None}
        """,
    )
    gpu_max_per_server = Integer(
        16,
        config=True,
        help="""
        The most GPUs (or MIG slices, or shared GPU replicas) one server may
        ask for, whatever a node reports. The spawn form lists each count as a
        choice and validation checks against it, so a bound keeps a node that
        claims absurd numbers (a misconfigured device plugin) from making
        every page view slow. A profile's ``max_gpus`` can only lower it.
        The default, 16, covers the largest GPU nodes sold (8 or 16 GPUs);
        raise it if users need more MIG slices or replicas in one server.

            c.GPUSpawner.gpu_max_per_server = 8
        """,
    )
    gpu_quota_admin = Integer(
        None,
        allow_none=True,
        config=True,
        help="""
        The GPU quota of JupyterHub admins. None (the default) is no limit;
        admins are not subject to ``gpu_quota`` or ``gpu_quota_by_group``.

            c.GPUSpawner.gpu_quota_admin = 16
        """,
    )

    @validate("gpu_max_per_server")
    def _validate_max_per_server(self, proposal):
        value = proposal.value
        if not 1 <= value <= GPU_COUNT_LIMIT_MAX:
            raise TraitError(
                f"gpu_max_per_server must be a whole number of GPUs from 1 to {GPU_COUNT_LIMIT_MAX}, "
                f"not {value!r}; e.g. c.GPUSpawner.gpu_max_per_server = 8"
            )
        return value

    @validate("gpu_quota", "gpu_quota_by_group", "gpu_quota_admin")
    def _validate_quota(self, proposal):
        arg = {"gpu_quota": "default", "gpu_quota_by_group": "by_group", "gpu_quota_admin": "admin"}
        try:
            QuotaPolicy.from_config(**{arg[proposal.trait.name]: proposal.value})
        except ValueError as e:
            raise TraitError(str(e)) from None
        return proposal.value

    def gpu_quota_policy(self) -> QuotaPolicy:
        return QuotaPolicy.from_config(self.gpu_quota, self.gpu_quota_by_group, self.gpu_quota_admin)

    _logged_capacity_problems: set[str] = set()

    # the Prometheus registry spawn outcomes are counted in; None: the one
    # /hub/metrics serves (a seam for tests, which pass their own)
    metrics_registry = None

    @default("apply_user_options")
    def _apply_user_options_default(self):
        return applied_in_load_user_options

    @validate("cuda_policy")
    def _validate_cuda_policy(self, proposal):
        if proposal.value not in POLICIES:
            raise TraitError(
                f"cuda_policy must be one of {', '.join(POLICIES)} (default minor), not {proposal.value!r}"
            )
        return proposal.value

    @validate("cuda_check")
    def _validate_cuda_check(self, proposal):
        try:
            return resolve_check(proposal.value)
        except ValueError as e:
            raise TraitError(str(e)) from None

    @validate("cuda_probe_image")
    def _validate_probe_image(self, proposal):
        if proposal.value is not None and not proposal.value.strip():
            raise TraitError("cuda_probe_image must be an image reference, or None for the server's image")
        return proposal.value

    @validate("gpu_capacity_sync_timeout", "gpu_full_pool_grace", "gpu_capacity_page_max_age")
    def _validate_sync_timeout(self, proposal):
        if not proposal.value >= 0 or proposal.value == float("inf"):
            raise TraitError(f"{proposal.trait.name} must be 0 or more seconds, not {proposal.value!r}")
        return proposal.value

    @default("additional_profile_form_template_paths")
    def _default_template_paths(self):
        return template_dirs()

    @default("options_form")
    def _options_form_default(self):
        if not self.gpu_profiles:
            return super()._options_form_default()
        return self._render_gpu_options_form

    # --- profiles and capacity ------------------------------------------

    async def capacity_snapshot(self, max_age: float = 0.0, renew: bool = False):
        """The cache's snapshot (waiting for its first sync at most
        ``gpu_capacity_sync_timeout``), or None when there is no cache.
        ``max_age``: counts that old will do; ``renew``: count anew and hold
        those for the page (``CapacityCache.snapshot``)."""
        try:
            cache = self.shared_capacity_cache()
            await cache.wait_synced(self.gpu_capacity_sync_timeout)
            # count where each profile's server fits (CPU, memory): a no-op unless the set changed
            cache.track_requests(self._tracked_requests())
            startwait.warn_slow_pools(self)
            snapshot = cache.snapshot(max_age, renew=renew)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self._log_capacity_problem(f"the GPU capacity cache could not start: {e}")
            return None
        problem = capacity_problem(snapshot)
        if problem:
            self._log_capacity_problem(problem)
        return snapshot

    def _log_capacity_problem(self, problem: str) -> None:
        # once per distinct problem per process: the page is rendered often, and the figures' age
        # (and any other number) changes with every view, so numbers do not make a problem new
        key = re.sub(r"[0-9]+", "N", problem)
        if key in self._logged_capacity_problems:
            return
        if len(self._logged_capacity_problems) >= 256:  # an API server that words each failure anew
            self._logged_capacity_problems.clear()
        self._logged_capacity_problems.add(key)
        self.log.warning(
            "%s. Static profiles are still offered; GPU profiles show 'capacity unknown'%s. "
            "If this is a permissions problem, apply deploy/rbac.yaml (ClusterRole rules: %s at the cluster scope).",
            problem,
            " and admit spawns unchecked" if self.gpu_admit_without_capacity else " and refuse GPU spawns",
            rules_text(),
        )

    async def gpu_profile_list(self) -> tuple[list[dict[str, Any]], dict[str, ProfileOffer]]:
        """The initialized profile list (static then GPU) and the GPU offers
        this server's user may use."""
        profile_list, view = await self.gpu_offer_view()
        return profile_list, view.offers

    async def gpu_offer_view(self, max_age: float = 0.0) -> tuple[list[dict[str, Any]], UserOffers]:
        """The initialized profile list and the GPU offers as this server's
        user sees them (``allowed_groups``, see gpuspawner.spawn.access), from
        counts at most ``max_age`` seconds old (0: the current counts)."""
        static = await self._static_profiles()
        return self._user_view(static, await self.gpu_offers(max_age))

    async def _static_profiles(self) -> list[dict[str, Any]]:
        static = self._sorted_dict_values(self.profile_list)
        if callable(static):
            static = await maybe_future(static(self))
        return static or []

    # this hub process's GPU offers, per capacity snapshot and configuration, and the forms
    # rendered from them, per what else a form shows (pagememo); both bounded
    _offer_memo: Memo = Memo(size=8)
    _form_memo: Memo = Memo(size=256)

    async def gpu_offers(self, max_age: float = 0.0, renew: bool = False) -> dict[str, ProfileOffer]:
        """Every GPU profile's offer (all users'), from counts at most ``max_age`` seconds old
        (``renew``: counted anew for the page); built once per snapshot and configuration in
        this hub process (``pagememo``)."""
        if not self.gpu_profiles:
            return {}
        snapshot = await self.capacity_snapshot(max_age, renew)
        requests = self.gpu_server_requests()
        config = fingerprint(self.gpu_profiles, self.gpu_pool_rules, self.gpu_admit_without_capacity,
                             self.gpu_max_per_server, self.cuda_policy, self.cuda_check, self.gpu_kueue_queues,
                             self.gpu_allow_multiple_shares, self._tracked_requests(), self.gpu_tolerated_taint_keys)
        # a snapshot's pools are one object until a count changes; its problem text (which
        # carries the figures' age when they are stale) is part of what the offers say
        source = snapshot.pools if snapshot is not None else None
        self.kueue_view()  # queued pools: the page's queue figures come from it (hub/queue.py)
        return self._offer_memo.get(source, (config, capacity_problem(snapshot)), lambda: queue_offers(build_offers(
            self.gpu_profile_specs(),
            snapshot,
            self.pool_rules(),
            admit_without_capacity=self.gpu_admit_without_capacity,
            fit=self._cuda_fit,
            count_limit=self.gpu_max_per_server,
            multiple_shares=self.gpu_allow_multiple_shares,
            requests=requests,
            tolerated_taint_keys=tuple(self.gpu_tolerated_taint_keys),
        ), self.queue_rules()))

    _request_memo: Memo = Memo(size=4)
    _tracked_memo: Memo = Memo(size=4)

    def _tracked_requests(self) -> tuple[tuple[int, ...], ...]:
        """Every distinct request of :meth:`gpu_server_requests`, sorted (what the cache counts)."""
        requests = self.gpu_server_requests()
        return self._tracked_memo.get(requests, None, lambda: tuple(sorted(serverfit.all_requests(requests))))

    def gpu_server_requests(self) -> dict[str, dict]:
        """Per GPU profile, what each image's pod asks of its node besides GPUs (``hub.serverfit``);
        worked out once per configuration in this hub process."""
        defaults = serverfit.spawner_defaults(self)
        return self._request_memo.get(self.gpu_profiles, fingerprint(defaults), lambda: serverfit.requests_of(
            self.gpu_profile_specs(), defaults))

    def _user_view(self, static: list[dict[str, Any]],
                   offers: dict[str, ProfileOffer]) -> tuple[list[dict[str, Any]], UserOffers]:
        view = offers_for(principal_of(self.user), offers, self.access_rules())
        merged, shadowed = merge_profiles(view.drop_hidden(static), view.offers)
        if shadowed:
            self.log.error("profile_list slugs %s are shadowed by gpu_profiles with the same slug", shadowed)
        return self._get_initialized_profile_list(merged), view

    _logged_check_errors: set[str] = set()
    # the CUDA verdicts of this hub process, per image and driver group (cudafit.VerdictMemo)
    _cuda_verdicts = cudafit.VerdictMemo()

    def _cuda_fit(self, image, pool) -> cudafit.PoolFit:
        """How ``image`` fits ``pool`` under this hub's policy and check,
        judged once per driver group and remembered (the page is rendered
        often). A broken ``cuda_check`` gives "unknown" (never a refusal)
        and is logged once per distinct error."""
        fit = cudafit.pool_fit(image, pool, self.cuda_policy, self.cuda_check, self._cuda_verdicts)
        for g in fit.groups:
            if g.verdict.rule == "check-error" and g.verdict.reason not in self._logged_check_errors:
                self._logged_check_errors.add(g.verdict.reason)
                self.log.error(
                    "c.GPUSpawner.cuda_check failed on the nodes of pool %s with driver %s: %s "
                    "Servers start unchecked until it is fixed.",
                    pool.id, g.driver, g.verdict.reason,
                )
        return fit

    # --- the spawn form ---------------------------------------------------

    async def _render_gpu_options_form(self, spawner=None):
        """The spawn form, from counts at most ``gpu_capacity_page_max_age`` old; a form
        rendered from the same offers for the same inputs is served again (``pagememo``).
        Past half the interval, the counts are renewed after this view, in the background
        (:meth:`_renew_page`), so the views after it do not wait for the rebuild."""
        max_age = self.gpu_capacity_page_max_age
        static = await self._static_profiles()
        cull_rules = self.cull_rules()
        who = principal_of(self.user)
        key = (
            # what the access rules read of a user (spawn.access): users alike share a form; the
            # rules themselves come from gpu_profiles and gpu_pool_rules, part of the offers' key
            who.groups,
            who.admin,
            fingerprint(static, self.user_options or {}, self._form_choices, self._quota_key(static),
                        repr(cull_rules), self.profile_form_template,
                        self.additional_profile_form_template_paths, sorted(self._admin_option_keys())),
        )
        offers = await self.gpu_offers(max_age)
        html = queue_glue.stop_notice(self) + self._form(offers, key, static, cull_rules)
        loop = asyncio.get_running_loop()
        renewing = any(t.get_loop() is loop and not t.done() for t in self._page_renewals)
        if max_age > 0 and not renewing:
            age = self._held_age()
            if age is not None and age >= max_age / 2:
                task = asyncio.ensure_future(self._renew_page(max_age, key, static, cull_rules))
                self._page_renewals.add(task)
                task.add_done_callback(self._page_renewals.discard)
        return usagepage.spawn_banner(self, offers) + html  # the user's own GPU-hours, above the shared form

    # the page renewal under way on this hub's loop (at most one: _render_gpu_options_form)
    _page_renewals: set[asyncio.Task] = set()

    def _form(self, offers: dict[str, ProfileOffer], key: Any, static: list[dict[str, Any]], cull_rules: Any) -> str:
        def render() -> str:
            profile_list, view = self._user_view(static, offers)
            return self._render_options_form(profile_list, view.offers, initialized=True, cull_rules=cull_rules)

        return self._form_memo.get(offers, key, render)

    def _held_age(self) -> float | None:
        try:
            return self.shared_capacity_cache().held_age()
        except Exception:  # no cache: capacity_snapshot has logged why
            return None

    async def _renew_page(self, max_age: float, key: Any, static: list[dict[str, Any]], cull_rules: Any) -> None:
        """Count anew, build the offers and render the form of the view that asked, once that
        view's answer is on its way (stale-while-revalidate: the same work a later view would do,
        done between requests)."""
        await asyncio.sleep(0)  # the view's own handler finishes its response first
        try:
            offers = await self.gpu_offers(max_age, renew=True)
            self._form(offers, key, static, cull_rules)
        except Exception as e:  # never a crash: the next view rebuilds inline
            self.log.warning("Renewing the spawn page's GPU offers failed: %s: %s", type(e).__name__, e)

    def _render_options_form(self, profile_list, gpu_offers=None, initialized=False, cull_rules=None):
        """KubeSpawner's renderer, with Jinja2 autoescaping on (node labels and
        admin strings reach the page; ``templates.render_form``) and the GPU
        offers in the context. ``initialized``: ``profile_list`` is already
        KubeSpawner's initialized copy (``gpu_profile_list`` makes one), so it
        is not deep-copied a second time on every view."""
        if not initialized:
            profile_list = self._get_initialized_profile_list(profile_list)
        gpu_offers = gpu_offers or {}
        user_options = dict(self.user_options or {})
        if user_options:
            try:
                validate_user_options(
                    user_options,
                    profile_list,
                    gpu_offers,
                    trait_names=self.trait_names(),
                    admin_keys=self._admin_option_keys(),
                )
            except OptionError as e:
                self.log.info("Not pre-selecting saved user options on the spawn form: %s", e)
                user_options = {}
        if not user_options and self._form_choices:
            # a refused request's choices: shown again as chosen, whatever made them refused (the
            # form marks a pool that cannot be had; nothing of them is trusted beyond comparison)
            user_options = dict(self._form_choices)
        try:
            quota = self.gpu_quota_view(profile_list)
        except Exception as e:  # no user (a bare spawner in a script): no quota line
            self.log.debug("No GPU quota on the spawn form: %s", e)
            quota = None
        return render_form(
            self.additional_profile_form_template_paths,
            self.profile_form_template,
            profile_list=profile_list,
            user_options=user_options,
            gpu_offers=gpu_offers,
            # (may hold, held by the user's other servers), or None: the count menu stays within it
            gpu_quota=quota,
            # the idle rule per profile and pool (gpu_cull_rules)
            cull_rules=cull_rules if cull_rules is not None else self.cull_rules(),
            idle_rule=self.idle_rule,
            # gpu_kueue_queues: (profile, pool) -> LocalQueue; a full queued card says so (queue/pools.py)
            gpu_queues=queued_pool_ids(gpu_offers, self.queue_rules()),
            full_card_text=full_card_text,
        )

    # --- spawning ---------------------------------------------------------

    # traits _apply_gpu_selection replaces; restored before each start so a
    # respawn into another pool does not AND the old pool's terms with the new
    _GPU_TRAITS = (
        "extra_resource_limits",
        "extra_resource_guarantees",
        "node_affinity_required",
        "tolerations",
        "extra_annotations",
        "init_containers",
        "modify_pod_hook",
        "extra_labels",  # Kueue's queue labels (hub/queue.py)
    )
    _gpu_base_traits: dict[str, Any] | None = None

    def _restore_gpu_traits(self) -> None:
        if self._gpu_base_traits is None:
            self._gpu_base_traits = {n: copy.deepcopy(getattr(self, n)) for n in self._GPU_TRAITS}
        else:
            for name, value in self._gpu_base_traits.items():
                setattr(self, name, copy.deepcopy(value))

    async def load_user_options(self):
        try:
            await self._load_gpu_user_options()
        finally:
            if self._cuda_notes is not None and not self._cuda_notes.done():
                self._cuda_notes.set_result(None)

    async def _load_gpu_user_options(self):
        """Validate the user's options against what is offered now, apply the
        profile, and for a GPU profile pin the pod to the pool (and to its
        nodes whose driver fits the image) and reserve its GPUs. Every user
        mistake, and an image no node of the pool can run, is an HTTP 400
        before any pod exists."""
        self.release_gpus()
        self._restore_gpu_traits()
        self._cuda_warnings = []
        self._probe_image = None
        self._gpu_spawn = None
        self.gpu_held = None  # unknown until this request passes its quota check
        profile_list, view = await self.gpu_offer_view()
        # from here to `self.gpu_held = ...` nothing awaits, so another spawn
        # of this user sees either no record (and is checked after this one,
        # against it) or this one's count: two spawns cannot both pass
        selection = None
        try:
            check_access(self.user_options, view)
            selection = validate_user_options(
                self.user_options,
                profile_list,
                view.offers,
                trait_names=self.trait_names(),
                admin_keys=self._admin_option_keys(),
            )
            if selection.gpus:
                self._check_gpu_quota(selection.gpus, profile_list)
                self._check_gpu_budget(selection)
        except AccessError as e:
            # a valid selection means the quota check refused it
            reason = "quota" if selection is not None else "not_allowed"
            self._count_refusal(reason, profile_list, view.offers)
            raise self._refuse(e.status, str(e), reason=reason) from None
        except OptionError as e:
            self._count_refusal(e.reason, profile_list, view.offers)
            # "cuda-driver": the CUDA check's reason label in JupyterHub's spawn metrics
            raise self._refuse(e.status, str(e), reason="cuda-driver" if isinstance(e, CudaRefusal) else e.reason) from None
        self.gpu_held = selection.gpus or 0
        if not profile_list:
            return
        if selection.offer is None:
            chosen = profile_list
        else:
            # gpu_pool/gpus are applied below, not as KubeSpawner choices
            profile = copy.deepcopy(next(p for p in profile_list if p["slug"] == selection.profile))
            for name in GPU_OPTIONS:
                profile["profile_options"].pop(name, None)
            chosen = [profile]
        try:
            self._load_profile(selection.profile, chosen)
        except ValueError as e:
            # KubeSpawner: an option with only a free-text choice and no value
            self._count_refusal(REFUSED_OTHER, profile_list, view.offers)
            raise self._refuse(
                400, f"{e} Choose a value for it on the spawn form or in user options.", reason=REFUSED_OTHER
            ) from None
        if selection.offer is not None:
            self._apply_gpu_selection(selection)

    # the choices of the last refused request, for the spawn page (hub.formchoices)
    _form_choices: dict[str, str] = {}
    # set when this start was refused before any Kubernetes object existed: the stop
    # JupyterHub then calls has nothing to delete (no API call, no log line)
    _refused = False

    def _refuse(self, status: int, message: str, *, reason: str, in_start: bool = True,
                what: str = "spawn") -> Refusal:
        """The error a refused request is raised with; logged here once, at INFO, without a
        traceback (JupyterHub's own ERROR lines about it are dropped: ``hub.logfilter``).

        The refused options are not kept as the next spawn's defaults: JupyterHub stores
        a request's options in its database before ``start`` (jupyterhub/user.py ``spawn``)."""
        self.log.info("Refused %s of %s (%s): %s", what, self._log_name, reason, message)
        if in_start:  # not for a query refused before JupyterHub stored anything
            self.gpu_held = 0
            self._refused = True
            # the spawn page comes back with what the user chose (not stored as the next spawn's)
            self._form_choices = form_choices(self.user_options)
            self._forget_refused_options()
        error = refusal(status, message, reason=reason)
        # the handlers' log, jupyterhub/user.py's (tornado's app_log) and tornado's own (gen_log)
        for logger in (_logger_of(self.log), app_log, gen_log):
            logfilter.install(logger)
        logfilter.expect(getattr(self.user, "name", ""), self.name, self._log_name, error)
        return error

    def _forget_refused_options(self) -> None:
        # in memory too: the spawn page re-rendered after a refused form post would otherwise
        # judge (and log) the same refused options once more
        self.user_options = {}
        orm = getattr(self, "orm_spawner", None)
        if orm is None or not getattr(orm, "user_options", None):
            return
        try:
            orm.user_options = {}
            db = getattr(self.user, "db", None)
            if db is not None:
                db.commit()
        except Exception as e:  # the refusal stands either way
            self.log.warning("Could not forget the refused options of %s: %s", self._log_name, e)

    async def options_from_query(self, query_data):
        """A query-string spawn (``/hub/spawn/<user>?profile=gpu&gpu_pool=...&gpus=2``): the REST
        API's option names and the form's are both read (``optionsource.options_from_query``); a
        name JupyterHub dropped before handing the query over, or one no profile takes, is refused
        with a 400 that names it, never ignored, before JupyterHub saves anything."""
        handler = getattr(self, "handler", None)
        raw = getattr(getattr(handler, "request", None), "query_arguments", None) or {}
        try:
            dropped = dropped_query_names(raw)
            if dropped:
                raise OptionError(
                    f"the query mixes `opt-` names with plain ones ({names(dropped)}), "
                    "and JupyterHub reads only the `opt-` ones: write every option the same way, "
                    "e.g. ?profile=gpu&gpus=2"
                )
            options = options_from_query(query_data)
        except OptionError as e:
            raise self._refuse(400, str(e), reason=e.reason, in_start=False) from None
        await self.check_options_to_save(options, spawn=True)
        return options

    async def _options_from_form(self, formdata):
        """A spawn form post, read by the query's rules (``optionsource.options_from_form``): the
        REST names mean what they mean in REST, and a name no profile takes, given twice or of
        another profile that the page does not show is refused with a 400 that names it
        (KubeSpawner's reader ignored all of them, and started another server than the one
        asked for), before JupyterHub saves anything.  An admin's own ``options_from_form``
        replaces this one."""
        profile_list, _ = await self.gpu_offer_view(self.gpu_capacity_page_max_age)
        fields = {p.get("slug"): tuple(p.get("profile_options") or ()) for p in profile_list}
        default = next((p.get("slug") for p in profile_list if p.get("default")), None)
        try:
            options = options_from_form(formdata, fields, default or next(iter(fields), None))
        except OptionError as e:
            raise self._refuse(400, str(e), reason=e.reason, in_start=False) from None
        await self.check_options_to_save(options, spawn=True)
        return options

    async def check_options_to_save(self, options: Any, *, spawn: bool) -> None:
        """Refuse, before JupyterHub saves them, options that no capacity could make right: names
        no profile takes, steering keys, counts that are no count, a profile or pool the user may
        not use (``hub.guard`` calls this for ``POST``, ``PUT`` and ``PATCH`` of a server).  What
        depends on the capacity of the moment (room in a pool, a pool that exists, CUDA) is
        checked when the server starts.  ``spawn``: the options start a server now (a refusal is
        counted as a refused spawn).  None of these rules reads a count: the offers the spawn page
        uses (at most ``gpu_capacity_page_max_age`` old, built once for all requests) will do."""
        profile_list, view = await self.gpu_offer_view(self.gpu_capacity_page_max_age)
        try:
            check_access(options, view)
            validate_user_options(options, profile_list, view.offers, trait_names=self.trait_names(),
                                  admin_keys=self._admin_option_keys())
        except AccessError as e:
            status, message, reason = e.status, str(e), "not_allowed"
        except OptionError as e:
            if e.reason not in STATIC_REASONS:
                return
            status, message, reason = e.status, str(e), e.reason
        else:
            return
        if spawn:
            self._count_refusal(reason, profile_list, view.offers, options)
        raise self._refuse(status, message, reason=reason, in_start=False,
                           what="spawn" if spawn else "options")

    def gpu_metrics(self) -> metrics.GPUMetrics:
        """The collector spawn outcomes are counted in (``metrics.install``: idempotent)."""
        return metrics.install(self.metrics_registry)

    def _count_refusal(self, reason: str, profile_list, offers, options: Any = None) -> None:
        """Count a refused request for GPUs (``gpuspawner_spawns_total{outcome="refused"}``).

        A request is for GPUs when its profile (or the default one) is a GPU
        profile or it names ``gpu_pool``/``gpus``; refusals of other requests
        are KubeSpawner's business and not counted.  The pool label is the
        requested pool only when some GPU profile offers it: a made-up id
        never becomes a label."""
        if options is None:
            options = self.user_options
        if not isinstance(options, Mapping):
            options = {}
        slug = options.get("profile")
        if not slug:
            default = next((p for p in profile_list if p.get("default")), profile_list[0] if profile_list else None)
            slug = default.get("slug") if default else None
        gpu_request = (isinstance(slug, str) and slug in offers) or any(k in options for k in GPU_OPTIONS)
        if not gpu_request:
            return
        pool_id = options.get("gpu_pool")
        known = isinstance(pool_id, str) and any(o.pool(pool_id) is not None for o in offers.values())
        self.gpu_metrics().spawn_refused(pool_id if known else None, reason)

    # GPUs this server holds or is starting with, once its request passed the
    # quota check (0: refused or no GPU); None: not checked yet. Kept in the
    # spawner's state so a restarted hub still counts running servers.
    gpu_held: int | None = None

    def _held_elsewhere(self, profile_list) -> list:
        """The GPUs each of this user's other active servers holds (``quota.held_servers``)."""
        others = [
            OtherServer(
                name=s.name,
                user_options=s.user_options,
                recorded=getattr(s, "gpu_held", None),
                spawning=s.pending == "spawn",
            )
            for s in self.user.spawners.values()
            if s is not self and s.active
        ]
        return held_servers(
            others,
            gpu_profiles={spec.slug for spec in self.gpu_profile_specs()},
            default_profile=next((p.get("slug") for p in profile_list if p.get("default")), None),
        )

    def _check_gpu_quota(self, gpus: int, profile_list) -> None:
        """Raise AccessError (403) if ``gpus`` more would take this server's
        user over their GPU quota. Synchronous on purpose (see the caller)."""
        policy = self.gpu_quota_policy()
        if not policy.enabled:
            return
        check_quota(principal_of(self.user), policy, self._held_elsewhere(profile_list), gpus, server_name=self.name)

    def _quota_key(self, static) -> Any:
        """What of the quota the form shows, for the form memo's key (users alike share a form)."""
        try:
            return self.gpu_quota_view(static)
        except Exception:
            return None

    def gpu_quota_view(self, profile_list) -> tuple[int, int] | None:
        """``(GPUs this user may hold, GPUs their other servers hold)`` for the spawn page; None when
        no quota limits them."""
        policy = self.gpu_quota_policy()
        if not policy.enabled:
            return None
        limit = policy.limit_for(principal_of(self.user)).gpus
        if limit is None:
            return None
        held = sum(h.gpus for h in self._held_elsewhere(profile_list) if h.name != self.name and h.gpus > 0)
        return limit, held

    _gpu_queued: queue_glue.QueuedSpawn | None = None  # this spawn's place in a Kueue queue
    _queue_base_timeout: float | None = None
    gpu_stop_message: str | None = None  # why Kueue stopped this server last (hub/queue.py note_stopped)

    def kueue_view(self):
        return super().kueue_view(self.namespace)

    def _check_gpu_budget(self, selection: Selection) -> None:
        """Refuse (403) a launch that the user's GPU-hour budget cannot cover for
        ``gpu_hour_minimum_minutes`` (``hub.usage``). Synchronous, like the quota check."""
        pool = selection.pool.pool
        verdict = gpu_hours.check_launch(self, pool, selection.gpus)
        if verdict is not None and not verdict.allowed:
            self.gpu_metrics().spawn_refused(pool.id, "budget")
            self.gpu_metrics().budget_refused(pool.id)
            raise self._refuse(403, verdict.message(), reason=gpu_hours.REFUSAL_REASON)

    def get_state(self):
        state = super().get_state()
        if self.gpu_held is not None:
            state["gpu_held"] = self.gpu_held
        if self._gpu_dra_template is not None:
            # so that a hub restarted while the server runs still cleans up claim templates at its stop
            state["gpu_dra_template"] = self._gpu_dra_template
        return state

    def load_state(self, state):
        super().load_state(state)
        held = state.get("gpu_held")
        self.gpu_held = held if isinstance(held, int) and not isinstance(held, bool) else None
        template = state.get("gpu_dra_template")
        self._gpu_dra_template = template if isinstance(template, str) else None

    def clear_state(self):
        super().clear_state()
        self.gpu_held = None

    def _admin_option_keys(self) -> tuple[str, ...]:
        # JupyterHub 5.3+: a dict apply_user_options names the option keys the
        # admin maps onto spawner traits on purpose (jupyterhub/spawner.py)
        hook = getattr(self, "apply_user_options", None)
        return tuple(hook) if isinstance(hook, dict) else ()

    def _is_gpu_resource(self, name: str) -> bool:
        try:
            config = self.capacity_config()
        except Exception:
            return False
        return config.is_gpu_resource(name)

    def _apply_gpu_selection(self, selection: Selection) -> None:
        pool, gpus = selection.pool.pool, selection.gpus
        fit = selection.cuda
        # a DRA pool keeps the driver check in the claim's CEL selectors (spawn/dra.py), not in affinity
        steer = cudafit.steering_expressions(fit, pool) if pool.dra is None else []
        try:
            overrides = build_overrides(
                pool,
                gpus,
                allowed_taint_keys=self.gpu_tolerated_taint_keys,
                limits=self.extra_resource_limits,
                guarantees=self.extra_resource_guarantees,
                affinity_required=self._sorted_dict_values(self.node_affinity_required),
                tolerations=self._sorted_dict_values(self.tolerations),
                is_gpu_resource=self._is_gpu_resource,
                extra_expressions=steer,
            )
        except ValueError as e:
            self.gpu_metrics().spawn_refused(pool.id, REFUSED_OTHER)
            raise self._refuse(400, f"{e}; choose another pool", reason=REFUSED_OTHER) from None
        for name, value in overrides.as_traits().items():
            setattr(self, name, value)
        self.extra_annotations = {
            **self.extra_annotations,
            POOL_ANNOTATION: pool.id,
            GPUS_ANNOTATION: str(gpus),
        }
        self._apply_cuda(selection)
        if pool.dra is not None:
            dra_glue.apply_selection(self, selection)
        hard = untolerated_taints(pool, self.gpu_tolerated_taint_keys)
        if hard:
            self.log.warning(
                "Pool %s carries taints %s that gpu_tolerated_taint_keys does not allow; "
                "its nodes will refuse %s",
                pool.id,
                ", ".join(f"{t.key}={t.value or ''}:{t.effect}" for t in hard),
                self._log_name,
            )
        startwait.stretch_for_pool(self, pool, gpus)
        if selection.pool.checked:
            owner = f"{self.namespace}/{self.pod_name}"
            try:
                cache = self.shared_capacity_cache()
                cache.reserve(owner, pool.id, gpus, selection.pool.request)
            except Exception as e:
                self.log.error("Could not reserve %d GPUs in %s for %s: %s", gpus, pool.id, owner, e)
            else:
                self._gpu_reservation = (cache, owner)
        self._gpu_spawn = GPUSpawnInfo(
            pool_id=pool.id, pool_name=selection.pool.display_name, resource=pool.resource, gpus=gpus,
            checked=selection.pool.checked, product=pool.product,
            request=selection.pool.request or serverfit.server_request_now(self),
        )
        queue_glue.apply_selection(self, selection.profile, pool.id, pool.resource)
        self.log.info(
            "%s gets %d x %s in pool %s%s",
            self._log_name,
            gpus,
            pool.resource,
            pool.id,
            " (after a scale-up)" if selection.pool.needs_scale_up(gpus) and self._gpu_queued is None else "",
        )

    _gpu_spawn: GPUSpawnInfo | None = None  # set by a GPU spawn's load_user_options
    _gpu_starting = False  # while _start waits for a GPU spawn's pod
    _gpu_wait_seen = False  # this spawn's GPU wait is recorded
    _start_began: float | None = None
    _gpu_reservation: tuple[Any, str] | None = None
    _cuda_warnings: list[str] | None = None
    _cuda_notes: asyncio.Future | None = None
    _probe_image: str | None = None
    _watch_probe = False

    def _apply_cuda(self, selection: Selection) -> None:
        """The CUDA check's part of a GPU spawn: log the steering, keep the
        warning for the spawn progress, add the probe init container."""
        pool, gpus, fit = selection.pool.pool, selection.gpus, selection.cuda
        if fit is not None and fit.excluded:
            self.log.info(
                "%s is kept off the nodes of pool %s with driver %s: it does not fit image %s",
                self._log_name, pool.id, ", ".join(sorted({g.driver for g in fit.excluded})), fit.image.name,
            )
        warning = fit.warning() if fit is not None else None
        if warning:
            self._cuda_warnings = [warning]
        if self.cuda_probe:
            image = selection.offer.spec.images.image(selection.image_key)
            self._probe_image = self.cuda_probe_image or self.image
            probe = probe_container(
                image, gpus, pool.resource, self.cuda_policy, self._probe_image, product=pool.product
            )
            existing = [
                c for c in self._sorted_dict_values(self.init_containers)
                if not (isinstance(c, dict) and c.get("name") == PROBE_CONTAINER)
            ]
            # the admin's init containers first: the probe runs last, right
            # before the server, on what they prepared
            self.init_containers = existing + [probe]
            self._watch_probe = True

    def release_gpus(self) -> None:
        """Give back GPUs reserved for this server's pod (a no-op if none)."""
        reservation, self._gpu_reservation = self._gpu_reservation, None
        if reservation is not None:
            cache, owner = reservation
            try:
                cache.release(owner)
            except Exception as e:
                self.log.error("Could not release GPUs reserved for %s: %s", owner, e)

    _admin_start_timeout: float | None = None

    def start(self):
        # a fresh future per spawn: progress() waits on it for this spawn's
        # CUDA warnings, computed in load_user_options
        self._cuda_notes = asyncio.get_running_loop().create_future()
        self._refused = False
        # each spawn starts from the admin's start_timeout: a queue's wait or a scale-up raised it for one spawn only
        if self._admin_start_timeout is None:
            self._admin_start_timeout = self.start_timeout
        self.start_timeout = self._admin_start_timeout
        queue_glue.extend_start_timeout(self)  # a queued server's wait does not count (hub/queue.py)
        reaper.ensure_running(self)
        # JupyterHub reads start_timeout as start() returns: a pool that must scale up gets its time now
        try:
            startwait.stretch_for_options(self, self.shared_capacity_cache().snapshot())
        except Exception as e:  # no cache yet: load_user_options still stretches KubeSpawner's own wait
            self.log.debug("start_timeout not adjusted before start: %s", e)
        return super().start()

    # KubeSpawner 7.1's reflector doubles its retry delay from 0.1 s and returns for good once it
    # passes 30 s (about 50 s of failed watches: kubespawner/reflector.py ``_watch_and_update``),
    # and one whose first list failed never starts watching; with one namespace nothing replaces
    # either until a spawn has waited out ``start_timeout`` for its pod.  So after an API server
    # outage the first spawn would hang.  KubeSpawner asks for its reflectors right after
    # ``load_user_options``: one that has loaded (or failed to), has no running watch and was
    # not stopped is replaced there.

    def _revive(self, reflector: Any) -> bool:
        if reflector is None or getattr(reflector, "_stopping", False):
            return False
        loaded = getattr(reflector, "first_load_future", None)
        if loaded is None or not loaded.done():
            return False  # still starting: KubeSpawner's own start waits for it
        task = getattr(reflector, "watch_task", None)
        if task is not None and not task.done():
            return False
        if not loaded.cancelled():
            loaded.exception()  # a failed first list, which KubeSpawner logged: retrieved here
        self.log.warning("KubeSpawner's %s watch is not running (after an API server outage?); restarting it",
                         getattr(reflector, "kind", "reflector"))
        return True

    async def _start_watching_pods(self, replace=False):
        return await super()._start_watching_pods(replace=replace or self._revive(self.pod_reflector))

    async def _start_watching_events(self, replace=False):
        return await super()._start_watching_events(replace=replace or self._revive(self.event_reflector))

    async def _start(self):
        self._gpu_spawn = None
        self._gpu_short = None
        self._gpu_wait_seen = False
        self._gpu_starting = True
        self._start_began = _clock()
        try:
            url = await super()._start()
        except asyncio.CancelledError:
            self.release_gpus()
            self.gpu_held = 0
            # JupyterHub cancels start() when start_timeout runs out
            # (jupyterhub/user.py spawn: asyncio.wait_for); an earlier
            # cancellation (hub shutdown) is no failure of the spawn
            if _clock() - self._start_began >= 0.9 * self.start_timeout:
                self._count_failure("timeout")
            raise
        except BaseException as e:
            self.release_gpus()
            self.gpu_held = 0
            self._count_failure(self._failure_reason(e))
            raise
        else:
            if self._gpu_spawn is not None:
                self.gpu_metrics().spawn_started(self._gpu_spawn.pool_id)
                await gpu_hours.record_start(self, self._gpu_spawn)  # the GPU-hour ledger
            return url
        finally:
            queue_glue.restore_start_timeout(self)
            self._gpu_starting = False
            self._watch_probe = False
            if self._cuda_notes is not None and not self._cuda_notes.done():
                self._cuda_notes.set_result(None)

    @staticmethod
    def _failure_reason(error: BaseException) -> str:
        if isinstance(error, GPUSpawnFailure):
            return error.kind
        if isinstance(error, TimeoutError):  # KubeSpawner's own wait: exponential_backoff's TimeoutError
            return "timeout"
        return "error"

    def _count_failure(self, reason: str) -> None:
        # only GPU spawns that got past their checks: refusals were counted as such
        if self._gpu_spawn is not None:
            self.gpu_metrics().spawn_failed(self._gpu_spawn.pool_id, reason)

    # --- the pod while it starts -----------------------------------------

    def _reflected_pods(self) -> Iterable[Any]:
        reflector = self.pod_reflector
        return list(reflector.pods.values()) if reflector is not None else ()

    def _reflected_pod(self) -> Any:
        reflector = self.pod_reflector
        return reflector.pods.get(f"{self.namespace}/{self.pod_name}") if reflector is not None else None

    def spawn_context(self, pod: Any = None) -> SpawnContext | None:
        """What this GPU spawn's progress is translated with: the pool as the
        capacity cache sees it now (no Kubernetes call) and the pods queued
        before ``pod`` (default: this server's pod in KubeSpawner's pod
        reflector).  None for a spawn without GPUs.  A pool the cache cannot
        vouch for (not synced, stale) is passed as unknown, so nothing is
        concluded from old numbers."""
        info = self._gpu_spawn
        if info is None:
            return None
        pool = None
        try:
            snapshot = self.shared_capacity_cache().snapshot()
        except Exception as e:
            self._log_capacity_problem(f"the GPU capacity cache could not start: {e}")
        else:
            if snapshot.synced and snapshot.healthy:
                pool = snapshot.pool(info.pool_id)
        if pod is None:
            pod = self._reflected_pod()
        return SpawnContext.from_pool(
            pool,
            pool_id=info.pool_id,
            gpus=info.gpus,
            queued_before=queued_before(self._reflected_pods(), pod, info.pool_id),
            tolerated_taint_keys=self.gpu_tolerated_taint_keys,
            pool_name=info.pool_name,
            resource=info.resource,
            request=info.request,
        )

    def _check_gpu_pod(self, pod: Mapping[str, Any]) -> None:
        """Record the GPU wait once the pod is scheduled, and end the wait at
        once (``GPUSpawnFailure``) when the pod can never start, or when the
        scheduler finds no room for its GPUs and a fresh count agrees
        (:meth:`_full_pool_verdict`)."""
        info = self._gpu_spawn
        if not self._gpu_wait_seen:
            if self.gpu_metrics().observe_pod_scheduled(info.pool_id, pod) is not None:
                self._gpu_wait_seen = True
        ctx = self.spawn_context(pod)
        verdict = fatal_verdict(pod, self.events, ctx)
        if verdict is None and info.checked:
            verdict = self._full_pool_verdict(pod, ctx)
        if verdict is not None:
            self.log.warning("GPU server %s cannot start (%s): %s", self._log_name, verdict.kind, verdict.reason)
            raise GPUSpawnFailure(verdict)

    # (first seen, recheck token) while the scheduler finds no room for this spawn's GPUs
    _gpu_short: tuple[float, float] | None = None

    def _full_pool_verdict(self, pod: Mapping[str, Any], ctx: Any) -> Any:
        """The spawn was admitted on counts with room, but the scheduler says ``Insufficient``
        GPUs: the counts were out of date (a stalled watch) or the GPUs went to another
        workload meanwhile.  The first time, give back this spawn's reservation (the
        scheduler did not place the pod either) and have the cache re-list the cluster; once
        ``gpu_full_pool_grace`` has passed and the re-list is done, fail when no node of the
        pool has room and it cannot grow (``pending.no_room_verdict``); else keep waiting."""
        info = self._gpu_spawn
        if not short_of_gpus(scheduling_failure(pod, self.events), info.resource):
            self._gpu_short = None
            return None
        now = _clock()
        try:
            cache = self.shared_capacity_cache()
            if self._gpu_short is None:
                self.release_gpus()
                self._gpu_short = (now, cache.recheck())
                self.log.info(
                    "The scheduler finds no room for %d GPU(s) of %s in pool %s; re-checking capacity",
                    info.gpus, self._log_name, info.pool_id,
                )
                return None
            since, token = self._gpu_short
            if now - since < self.gpu_full_pool_grace or not cache.rechecked_since(token):
                return None
        except Exception as e:  # the start timeout still ends the wait
            self._log_capacity_problem(f"the GPU capacity cache could not re-check: {e}")
            return None
        return no_room_verdict(ctx)

    def is_pod_running(self, pod):
        """KubeSpawner's test, which its ``_start`` polls until the pod runs
        (kubespawner/spawner.py ``_start``: ``exponential_backoff(lambda:
        self.is_pod_running(...))``); while a spawn with the probe is waiting,
        a failed probe ends the wait with the probe's own message, instead of
        the start timeout (the probe's init container would otherwise restart
        in CrashLoopBackOff until then)."""
        if self._watch_probe and pod is not None:
            failure = probe_failure(pod, self._probe_image)
            if failure:
                self.log.warning("GPU probe failed for %s: %s", self._log_name, failure)
                raise spawn_error(failure, reason="gpu-probe", status_code=500)
        if self._gpu_starting:
            queue_glue.check_pod(self, pod)  # the wait in a Kueue queue, and its limits
        if self._gpu_starting and self._gpu_spawn is not None and isinstance(pod, Mapping):
            # a GPU spawn's wait: the GPU wait metric, and an early end when
            # the pod can never start (a fatal translation) instead of the timeout
            self._check_gpu_pod(pod)
        return super().is_pod_running(pod)

    async def progress(self):
        """The CUDA warning of this spawn first (minor-version compatibility
        and the like), then KubeSpawner's events, for a GPU spawn in GPU
        words (``progress.rewrite_progress_event``: waiting for a free GPU in
        pool X with n servers queued before, a scale-up, a taint nothing
        tolerates, the image pull...)."""
        notes = self._cuda_notes
        if notes is not None:
            await asyncio.wait([notes], timeout=self.start_timeout)
        for warning in self._cuda_warnings or ():
            yield {"progress": 0, "message": warning}
        async for event in queue_glue.with_queue_messages(self, super().progress()):
            ctx = self.spawn_context()
            if ctx is not None:
                event, _ = rewrite_progress_event(event, ctx)
            yield event

    _gpu_dra_template: str | None = None  # "<namespace>/<name>" of this server's claim template
    _gpu_ledger_checked = False  # its first poll has made sure a running GPU server has its holding

    # set when a pod create request is sent, until a stop has had it deleted
    _pod_requested = False

    async def _make_create_pod_request(self, pod, request_timeout):
        self._pod_requested = True
        return await super()._make_create_pod_request(pod, request_timeout)

    async def poll(self):
        """KubeSpawner's poll, except after a refused start: nothing runs, and nothing needs a
        Kubernetes call to say so (JupyterHub polls before cleaning up a failed start). A pod
        this spawner asked for that the pod reflector has not seen (its watch lags or stalls)
        is asked of the API server: while it exists the server counts as running, so
        JupyterHub calls ``stop`` (a cancelled spawn, a failed one) and the pod is deleted."""
        if self._refused:
            return 0
        reaper.ensure_running(self)
        status = await super().poll()
        if self._pod_requested:
            status = await leftpod.poll_status(self, status)
        if status is not None:
            queue_glue.note_stopped(self)  # Kueue preempted or evicted it: the spawn page says why
            # JupyterHub calls no stop() for a server found stopped: close its GPU-hour holding here
            gpu_hours.record_stop(self, gpu_hours.pod_end_now(self._reflected_pod()), reason="pod-gone")
        elif not self._gpu_ledger_checked and not self._gpu_starting:
            self._gpu_ledger_checked = True  # once per spawner: a server running since before this hub
            await gpu_hours.adopt(self)
        gpu_hours.schedule_sweep(self)  # the GPU-hour ledger: close holdings whose pods ended
        return status

    async def stop(self, now=False):
        self.release_gpus()
        if self._refused:
            # refused in load_user_options, before KubeSpawner created anything
            self._refused = False
            return None
        reaper.ensure_running(self)
        ended = gpu_hours.pod_end_now(self._reflected_pod())  # a pod that ended before the stop
        result = await super().stop(now=now)
        self._pod_requested = False
        gpu_hours.record_stop(self, ended)  # the GPU-hour ledger: closed once the pod is gone
        if self._gpu_dra_template is not None:
            await dra_glue.remove_unused_templates(self)
        return result


def _logger_of(log: Any) -> Any:
    """The ``logging.Logger`` behind a spawner's ``log`` (a Logger or a LoggerAdapter)."""
    return getattr(log, "logger", log)


def capacity_settings_class(spawner_class: object) -> type[GPUSpawnerSettings]:
    """The class whose config sections hold the hub's GPU capacity settings: the hub's spawner
    class when it is a ``GPUSpawnerSettings`` (``GPUSpawner`` or a subclass), else ``GPUSpawner``,
    where the docs tell an admin to write them (a hub that runs another spawner)."""
    if isinstance(spawner_class, type) and issubclass(spawner_class, GPUSpawnerSettings):
        return spawner_class
    return GPUSpawner
