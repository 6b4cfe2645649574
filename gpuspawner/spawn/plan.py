"""One spawn's decision: a request, the offers and the policy in; a ``SpawnPlan`` or a ``PlanRefusal`` out."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gpuspawner.capacity.model import Taint
from gpuspawner.spawn.access import AccessError, Principal, UserOffers, check_access
from gpuspawner.spawn.cuda_fit import steering_expressions
from gpuspawner.spawn.dra_claim import claim_template, probe_with_claim
from gpuspawner.spawn.options import OTHER, CudaRefusal, OptionError, Selection, validate_user_options
from gpuspawner.spawn.overrides import build_overrides
from gpuspawner.spawn.pending_verdicts import GPUS_ANNOTATION, POOL_ANNOTATION
from gpuspawner.spawn.probe_container import PROBE_CONTAINER, probe_container
from gpuspawner.spawn.profiles import GPU_OPTIONS
from gpuspawner.spawn.quota import HeldServer, QuotaPolicy, check_quota
from gpuspawner.spawn.tolerations import untolerated_taints

__all__ = ["SpawnPolicy", "SpawnRequest", "PodTraits", "SpawnPlan", "PlanRefusal", "plan_spawn", "fill_pod",
           "refusal_pool"]


@dataclass(frozen=True)
class SpawnPolicy:
    """The admin's rules a spawn is planned under."""

    trait_names: frozenset[str] = frozenset()
    admin_keys: tuple[str, ...] = ()
    quota: QuotaPolicy = field(default_factory=QuotaPolicy)
    tolerated_taint_keys: tuple[str, ...] = ()
    cuda_policy: str = "minor"
    probe_image: str | None = None  # the probe init container's image; None: no probe


@dataclass(frozen=True)
class SpawnRequest:
    """What the hub gathered for one request: the options, the offers this user sees, what they hold."""

    options: Any
    profile_list: Sequence[Mapping[str, Any]]  # KubeSpawner's initialized list (static, then GPU)
    view: UserOffers
    principal: Principal
    server_name: str = ""
    held: Sequence[HeldServer] = ()  # the user's other servers' GPUs (quota.held_servers)


@dataclass(frozen=True)
class PodTraits:
    """The spawner's pod traits once the chosen profile is applied (what a GPU pool adds to)."""

    namespace: str
    limits: Mapping[str, Any] = field(default_factory=dict)
    guarantees: Mapping[str, Any] = field(default_factory=dict)
    affinity_required: Sequence[Any] = ()
    tolerations: Sequence[Any] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)
    init_containers: Sequence[Any] = ()
    is_gpu_resource: Callable[[str], bool] = lambda name: False


@dataclass(frozen=True)
class PlanRefusal:
    """A request that must not start: the HTTP status and message, the reason logged and counted."""

    status: int
    message: str
    reason: str  # the refusal's reason (JupyterHub's spawn metrics, the log line)
    counted: str  # gpuspawner_spawns_total's reason label
    pool: str | None = None  # the pool label, when the refusal is about a known pool


@dataclass(frozen=True)
class SpawnPlan:
    """Everything a start needs: the profile KubeSpawner applies, then, for a GPU pool, what the pod gets."""

    selection: Selection
    profiles: tuple[dict[str, Any], ...]  # what KubeSpawner's ``_load_profile`` applies
    gpus: int = 0  # GPUs held once started (0: none)
    traits: Mapping[str, Any] = field(default_factory=dict)  # trait name -> value for KubeSpawner
    claim_template: Mapping[str, Any] | None = None  # a DRA pool's ResourceClaimTemplate
    reservation: tuple[str, int, Any] | None = None  # (pool, GPUs, server request) to reserve on counts
    warnings: tuple[str, ...] = ()  # shown first in the spawn's progress
    excluded_drivers: tuple[str, ...] = ()  # drivers of the pool kept off (the image does not fit them)
    untolerated: tuple[Taint, ...] = ()  # taints of the pool the server may not tolerate
    probe_image: str | None = None  # set when the probe init container runs

    @property
    def pool(self) -> Any:
        return self.selection.pool.pool if self.selection.pool is not None else None

    @property
    def metric_pool(self) -> str | None:
        """The pool label of this spawn's metrics (None: no GPUs)."""
        return self.pool.id if self.pool is not None else None


def plan_spawn(request: SpawnRequest, policy: SpawnPolicy) -> SpawnPlan | PlanRefusal:
    """Check access, options and quota; the plan names the profile to apply (GPU options taken out)."""
    selection = None
    try:
        check_access(request.options, request.view)
        selection = validate_user_options(request.options, request.profile_list, request.view.offers,
                                          trait_names=policy.trait_names,
                                          admin_keys=policy.admin_keys)
        if selection.gpus and policy.quota.enabled:
            check_quota(request.principal, policy.quota, request.held, selection.gpus,
                        server_name=request.server_name)
    except AccessError as e:
        reason = "quota" if selection is not None else "not_allowed"  # a valid selection: the quota refused it
        return PlanRefusal(e.status, str(e), reason, reason)
    except OptionError as e:
        # "cuda-driver": the CUDA check's reason label in JupyterHub's spawn metrics
        return PlanRefusal(e.status, str(e), "cuda-driver" if isinstance(e, CudaRefusal) else e.reason, e.reason)
    profile_list = request.profile_list
    if not profile_list or selection.offer is None:
        profiles = tuple(profile_list)
    else:
        # gpu_pool/gpus are applied from the plan, not as KubeSpawner choices
        profile = copy.deepcopy(next(p for p in profile_list if p["slug"] == selection.profile))
        for name in GPU_OPTIONS:
            profile["profile_options"].pop(name, None)
        profiles = (profile,)
    return SpawnPlan(selection=selection, profiles=profiles, gpus=selection.gpus or 0)


def fill_pod(plan: SpawnPlan, pod: PodTraits, policy: SpawnPolicy) -> SpawnPlan | PlanRefusal:
    """What a GPU pool adds to the pod, device plugin or DRA: resources, affinity, tolerations,
    annotations, the probe, the claim template, the reservation, the CUDA warning."""
    selection = plan.selection
    if selection.pool is None:
        return plan
    pool, gpus, fit = selection.pool.pool, plan.gpus, selection.cuda
    dra = pool.dra is not None
    try:
        overrides = build_overrides(
            pool, gpus, allowed_taint_keys=policy.tolerated_taint_keys, limits=pod.limits,
            guarantees=pod.guarantees, affinity_required=list(pod.affinity_required),
            tolerations=list(pod.tolerations), is_gpu_resource=pod.is_gpu_resource,
            # a DRA pool keeps the driver check in the claim's CEL selectors (dra_claim), not in affinity
            extra_expressions=[] if dra else steering_expressions(fit, pool),
        )
    except ValueError as e:
        return PlanRefusal(400, f"{e}; choose another pool", OTHER, OTHER, pool=pool.id)
    traits = overrides.as_traits()
    traits["extra_annotations"] = {**pod.annotations, POOL_ANNOTATION: pool.id, GPUS_ANNOTATION: str(gpus)}
    init_containers = list(pod.init_containers)
    if policy.probe_image is not None:
        image = selection.offer.spec.images.image(selection.image_key)
        probe = probe_container(image, gpus, pool.resource, policy.cuda_policy, policy.probe_image,
                                product=pool.product)
        # the admin's init containers first: the probe runs last, right before the server, on what they prepared
        init_containers = [c for c in init_containers
                           if not (isinstance(c, dict) and c.get("name") == PROBE_CONTAINER)] + [probe]
    template = None
    if dra:
        template = claim_template(pool, gpus, pod.namespace, fit)
        init_containers = [probe_with_claim(c, pool, gpus)
                           if isinstance(c, dict) and c.get("name") == PROBE_CONTAINER else c
                           for c in init_containers]
    if policy.probe_image is not None or dra:
        traits["init_containers"] = init_containers
    warning = fit.warning() if fit is not None else None
    return replace(
        plan,
        traits=traits,
        claim_template=template,
        reservation=(pool.id, gpus, selection.pool.request) if selection.pool.checked else None,
        warnings=(warning,) if warning else (),
        excluded_drivers=tuple(sorted({g.driver for g in fit.excluded})) if fit is not None and fit.excluded else (),
        untolerated=tuple(untolerated_taints(pool, policy.tolerated_taint_keys)),
        probe_image=policy.probe_image,
    )


def refusal_pool(options: Any, profile_list: Sequence[Mapping[str, Any]], offers: Mapping[str, Any]) -> tuple[bool, str | None]:
    """Whether a refused request asked for GPUs (its profile, or the default one, is a GPU profile, or it
    names ``gpu_pool``/``gpus``), and the pool label to count it under: the requested pool only when some
    GPU profile offers it, so a made-up id never becomes a label."""
    if not isinstance(options, Mapping):
        options = {}
    slug = options.get("profile")
    if not slug:
        default = next((p for p in profile_list if p.get("default")), profile_list[0] if profile_list else None)
        slug = default.get("slug") if default else None
    gpu_request = (isinstance(slug, str) and slug in offers) or any(k in options for k in GPU_OPTIONS)
    pool_id = options.get("gpu_pool")
    known = isinstance(pool_id, str) and any(o.pool(pool_id) is not None for o in offers.values())
    return gpu_request, pool_id if known else None
