"""A spawn's plan between the hub and ``spawn.plan``: what is gathered for it, and the plan applied to the spawner."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

from gpuspawner.hub import dra_templates, kueue_wait, scale_up_timeout, server_requests, spawn_page, user_quota
from gpuspawner.hub.pod_wait import GPUSpawnInfo, SpawnRecord
from gpuspawner.spawn.access import principal_of
from gpuspawner.hub import poolimages
from gpuspawner.spawn.plan import PodTraits, SpawnPlan, SpawnPolicy, SpawnRequest

__all__ = ["GPU_TRAITS", "restore_traits", "policy_of", "gather", "pod_traits", "apply"]

# traits a plan replaces; restored before each start so a respawn into another pool does not
# AND the old pool's terms with the new
GPU_TRAITS = (
    "extra_resource_limits",
    "extra_resource_guarantees",
    "node_affinity_required",
    "tolerations",
    "extra_annotations",
    "init_containers",
    "modify_pod_hook",
    "extra_labels",  # Kueue's queue labels (hub/kueue_wait.py)
    "node_affinity_preferred",  # warm nodes of the pool (hub/poolimages.prefer_warm)
)


def restore_traits(spawner: Any) -> None:
    """The admin's values of :data:`GPU_TRAITS`, kept at the first spawn and put back at each later one."""
    base = spawner.__dict__.get("_gpu_base_traits")
    if base is None:
        spawner.__dict__["_gpu_base_traits"] = {n: copy.deepcopy(getattr(spawner, n)) for n in GPU_TRAITS}
    else:
        for name, value in base.items():
            setattr(spawner, name, copy.deepcopy(value))


def policy_of(spawner: Any) -> SpawnPolicy:
    return SpawnPolicy(
        trait_names=frozenset(spawner.trait_names()),
        admin_keys=spawn_page.admin_option_keys(spawner),
        quota=spawner.spawn_config().quota,
        tolerated_taint_keys=tuple(spawner.gpu_tolerated_taint_keys),
        cuda_policy=spawner.cuda_policy,
        probe_image=(spawner.cuda_probe_image or spawner.image) if spawner.cuda_probe else None,
    )


async def gather(spawner: Any) -> SpawnRequest:
    """The request as the hub sees it now: the options, the current offers this user sees, what
    their other servers hold. Nothing awaits after the offers, so another spawn of this user is
    checked against this one's count or before it: two spawns cannot both pass the quota."""
    profile_list, view = await spawn_page.offer_view(spawner)
    return SpawnRequest(options=spawner.user_options, profile_list=profile_list, view=view,
                        principal=principal_of(spawner.user), server_name=spawner.name,
                        held=user_quota.held_elsewhere(spawner, profile_list) if spawner.spawn_config().quota.enabled else ())


def _is_gpu_resource(spawner: Any, name: str) -> bool:
    try:
        config = spawner.capacity_config()
    except Exception:
        return False
    return config.is_gpu_resource(name)


def pod_traits(spawner: Any) -> PodTraits:
    """The spawner's pod traits once KubeSpawner applied the chosen profile."""
    return PodTraits(
        namespace=spawner.namespace,
        limits=spawner.extra_resource_limits,
        guarantees=spawner.extra_resource_guarantees,
        affinity_required=spawner._sorted_dict_values(spawner.node_affinity_required),
        tolerations=spawner._sorted_dict_values(spawner.tolerations),
        annotations=spawner.extra_annotations,
        init_containers=spawner._sorted_dict_values(spawner.init_containers),
        is_gpu_resource=lambda name: _is_gpu_resource(spawner, name),
    )


def apply(spawner: Any, plan: SpawnPlan) -> SpawnRecord:
    """Set the plan's traits, the DRA claim hook, the start timeout, the reservation and the Kueue
    labels on the spawner; the spawn's record."""
    selection, pool, gpus = plan.selection, plan.pool, plan.gpus
    for name, value in plan.traits.items():
        setattr(spawner, name, value)
    spawner.node_affinity_preferred = poolimages.prefer_warm(spawner, selection)  # warm nodes first
    log_name = spawner._log_name
    if plan.excluded_drivers:
        spawner.log.info("%s is kept off the nodes of pool %s with driver %s: it does not fit image %s",
                         log_name, pool.id, ", ".join(plan.excluded_drivers), selection.cuda.image.name)
    if plan.claim_template is not None:
        spawner._spawn = replace(spawner._spawn,
                                 dra_template=dra_templates.hold(plan.claim_template, spawner._spawn.dra_template))
        spawner.modify_pod_hook = dra_templates.claim_hook(spawner.modify_pod_hook, plan.claim_template)
    if plan.untolerated:
        spawner.log.warning(
            "Pool %s carries taints %s that gpu_tolerated_taint_keys does not allow; its nodes will refuse %s",
            pool.id, ", ".join(f"{t.key}={t.value or ''}:{t.effect}" for t in plan.untolerated), log_name,
        )
    scale_up_timeout.stretch_for_pool(spawner, pool, gpus)
    reservation = None
    if plan.reservation is not None:
        pool_id, count, request = plan.reservation
        owner = f"{spawner.namespace}/{spawner.pod_name}"
        cache = spawner.capacity_cache()
        try:
            if cache is None:
                raise RuntimeError("no capacity cache")
            cache.reserve(owner, pool_id, count, request)
        except Exception as e:
            spawner.log.error("Could not reserve %d GPUs in %s for %s: %s", count, pool_id, owner, e)
        else:
            reservation = (cache, owner)
    record = replace(
        spawner._spawn,
        info=GPUSpawnInfo(
            pool_id=pool.id, pool_name=selection.pool.display_name, resource=pool.resource, gpus=gpus,
            checked=selection.pool.checked, product=pool.product,
            request=selection.pool.request or server_requests.server_request_now(spawner),
        ),
        warnings=plan.warnings,
        probe_image=plan.probe_image,
        watch_probe=plan.probe_image is not None,
        reservation=reservation,
    )
    spawner._spawn = record
    kueue_wait.apply_selection(spawner, selection.profile, pool.id, pool.resource)  # may release the reservation
    spawner.log.info(
        "%s gets %d x %s in pool %s%s", log_name, gpus, pool.resource, pool.id,
        " (after a scale-up)" if selection.pool.needs_scale_up(gpus) and spawner._spawn.queued is None else "",
    )
    return spawner._spawn
