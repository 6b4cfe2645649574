"""A spawn's plan applied to the spawner (gpuspawner.hub.plan_apply): the admin's traits restored, the plan's set."""

from __future__ import annotations

from gpuspawner.hub import plan_apply
from gpuspawner.spawn.plan import SpawnPlan, plan_spawn
from tests.hub.test_spawner import A100, LAST, cache, make_spawner  # noqa: F401 (a fixture)


async def test_each_spawn_starts_from_the_admins_traits(no_kube_client, cache):
    admin = [{"key": "example.com/team", "operator": "Exists", "effect": "NoSchedule"}]
    s = make_spawner(tolerations=admin)
    s.user_options = {"profile": "gpu", "gpu_pool": A100.id, "gpus": 2}
    await s.load_user_options()
    assert s.tolerations[0] == admin[0] and len(s.tolerations) == 2
    s.user_options = {"profile": "gpu", "gpu_pool": LAST.id, "gpus": 1}
    await s.load_user_options()  # the first pool's toleration is not kept
    assert s.tolerations == admin
    assert s.extra_resource_limits == {"nvidia.com/gpu": "1"}


async def test_the_gathered_request_is_what_the_plan_decides_on(no_kube_client, cache):
    s = make_spawner(gpu_quota=4)
    s.user_options = {"profile": "gpu", "gpu_pool": A100.id, "gpus": 2}
    request = await plan_apply.gather(s)
    assert request.options == s.user_options and list(request.held) == []  # no other server holds GPUs
    plan = plan_spawn(request, plan_apply.policy_of(s))
    assert isinstance(plan, SpawnPlan) and (plan.metric_pool, plan.gpus) == (A100.id, 2)


async def test_the_applied_plan_is_the_spawns_record_and_reservation(no_kube_client, cache):
    s = make_spawner()
    s.user_options = {"profile": "gpu", "gpu_pool": A100.id, "gpus": 2}
    await s.load_user_options()
    record = s._spawn
    assert (record.info.pool_id, record.info.gpus) == (A100.id, 2)
    assert record.reservation is not None and cache.reservations == {f"jhub/{s.pod_name}": (A100.id, 2)}
    s.release_gpus()
    assert s._spawn.reservation is None and cache.reservations == {}
