"""A spawn's plan (gpuspawner.spawn.plan): a request and the offers in, a plan or a refusal out. Pure: no hub, no cluster."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import pytest

from gpuspawner.capacity.model import CapacitySnapshot, Taint
from gpuspawner.spawn.access import AccessRules, Principal, offers_for
from gpuspawner.spawn.plan import PlanRefusal, PodTraits, SpawnPlan, SpawnPolicy, SpawnRequest, fill_pod, plan_spawn
from gpuspawner.spawn.profiles import GPUProfileSpec, build_offers, merge_profiles
from gpuspawner.spawn.quota import HeldServer, QuotaPolicy
from tests.builders import pool_view
from tests.builders.dra import dra_a100_pools

GPU_TAINT = Taint("nvidia.com/gpu", "present", "NoSchedule")
pool = partial(pool_view, nodes=2, taints=(GPU_TAINT,))
A100 = pool("a100", "NVIDIA-A100-SXM4-80GB", total=16, free=5, per_node=3)
T4 = pool("t4", "Tesla-T4", total=4, free=2, per_node=1)
RESERVED = pool("rsv", "Tesla-T4", total=4, free=4, per_node=2, taints=(Taint("example.com/reserved", "", "NoSchedule"),))
DRA = dra_a100_pools()["gpu.nvidia.com"]

PROFILES = [
    {"slug": "gpu", "pools": {"exclude": ["dra-a100:*"]}},
    {"slug": "staff", "allowed_groups": ["staff"]},
    {"slug": "dra", "pools": {"include": ["dra-a100:*"]}},
]
SPECS = tuple(GPUProfileSpec.from_config(p) for p in PROFILES)
STATIC = [{"display_name": "CPU", "slug": "cpu", "default": True}]
ALICE = Principal(name="alice", groups=frozenset(), admin=False)
POLICY = SpawnPolicy(trait_names=frozenset({"image"}), tolerated_taint_keys=("nvidia.com/gpu",))


def request(options, *, who=ALICE, held=(), admit=False) -> SpawnRequest:
    snapshot = CapacitySnapshot(pools=(A100, T4, RESERVED, DRA), synced=True, age_seconds=1.0, generation=1)
    offers = build_offers(SPECS, snapshot, (), admit_without_capacity=admit)
    view = offers_for(who, offers, AccessRules.from_config(PROFILES, []))
    profiles, _ = merge_profiles(view.drop_hidden(STATIC), view.offers)
    for p in profiles:
        p.setdefault("profile_options", {})
    return SpawnRequest(options=options, profile_list=profiles, view=view, principal=who, held=held)


PLANS = [
    # options, (profile, pool, GPUs held)
    ({}, ("cpu", None, 0)),
    ({"profile": "gpu", "gpu_pool": A100.id, "gpus": 2}, ("gpu", A100.id, 2)),
    ({"profile": "gpu", "gpu_pool": T4.id, "gpus": "1"}, ("gpu", T4.id, 1)),
    ({"profile": "dra", "gpu_pool": DRA.id, "gpus": 2}, ("dra", DRA.id, 2)),
]


@pytest.mark.parametrize("options, expected", PLANS, ids=["cpu-default", "a100-2", "t4-text-count", "dra-2"])
def test_a_valid_request_is_planned_with_its_profile_pool_and_count(options, expected):
    plan = plan_spawn(request(options), POLICY)
    assert isinstance(plan, SpawnPlan)
    assert (plan.selection.profile, plan.metric_pool, plan.gpus) == expected


def test_the_gpu_options_are_taken_out_of_the_profile_kubespawner_applies():
    plan = plan_spawn(request({"profile": "gpu", "gpu_pool": A100.id, "gpus": 2}), POLICY)
    (profile,) = plan.profiles
    assert profile["slug"] == "gpu" and not {"gpu_pool", "gpus"} & set(profile["profile_options"])


REFUSALS = [
    # options, request keywords, (status, reason, counted reason)
    ({"profile": "gpu", "gpu_pool": A100.id, "gpus": 99}, {}, (400, "too_many_gpus", "too_many_gpus")),
    ({"profile": "staff"}, {}, (403, "not_allowed", "not_allowed")),
    ({"profile": "gpu", "gpu_pool": "made-up:pool"}, {}, (400, "unknown_pool", "unknown_pool")),
    ({"profile": "gpu", "gpu_pool": A100.id, "gpus": 2},
     {"held": (HeldServer("other", 1),)}, (403, "quota", "quota")),
]


@pytest.mark.parametrize("options, kw, expected", REFUSALS, ids=["too-many", "not-allowed", "unknown-pool", "quota"])
def test_a_request_that_cannot_start_is_refused_with_status_and_reason(options, kw, expected):
    policy = replace(POLICY, quota=QuotaPolicy.from_config(2))
    refused = plan_spawn(request(options, **kw), policy)
    assert isinstance(refused, PlanRefusal)
    assert (refused.status, refused.reason, refused.counted) == expected
    assert refused.message  # the words the user sees


def pod(**kw) -> PodTraits:
    return PodTraits(namespace="jhub", **kw)


def filled(options, policy=POLICY, traits=None, admit=False):
    plan = plan_spawn(request(options, admit=admit), policy)
    assert isinstance(plan, SpawnPlan)
    return fill_pod(plan, traits or pod(), policy)


def test_a_device_plugin_pool_gets_its_resource_affinity_tolerations_annotations_and_reservation():
    plan = filled({"profile": "gpu", "gpu_pool": A100.id, "gpus": 2})
    assert plan.traits["extra_resource_limits"] == {"nvidia.com/gpu": "2"}
    assert plan.traits["node_affinity_required"]
    assert {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"} in \
        plan.traits["tolerations"]
    assert plan.traits["extra_annotations"] == {"gpuspawner.io/pool": A100.id, "gpuspawner.io/gpus": "2"}
    assert plan.claim_template is None and "init_containers" not in plan.traits
    assert plan.reservation[:2] == (A100.id, 2)


def test_a_dra_pool_gets_a_claim_template_and_no_extended_resource():
    plan = filled({"profile": "dra", "gpu_pool": DRA.id, "gpus": 2})
    assert plan.claim_template["kind"] == "ResourceClaimTemplate"
    assert plan.claim_template["metadata"]["namespace"] == "jhub"
    assert not any("/" in k for k in plan.traits["extra_resource_limits"])


def test_the_probe_runs_last_after_the_admins_init_containers():
    admin = {"name": "admin-init", "image": "busybox"}
    plan = filled({"profile": "gpu", "gpu_pool": A100.id, "gpus": 1}, replace(POLICY, probe_image="probe:1"),
                  pod(init_containers=[admin]))
    assert [c["name"] for c in plan.traits["init_containers"]] == ["admin-init", "gpuspawner-probe"]
    assert plan.probe_image == "probe:1"


def test_taints_the_server_may_not_tolerate_are_named_for_the_log():
    plan = filled({"profile": "gpu", "gpu_pool": RESERVED.id, "gpus": 1})
    assert [t.key for t in plan.untolerated] == ["example.com/reserved"]


def test_a_spawn_admitted_without_counts_reserves_nothing():
    unknown = CapacitySnapshot(pools=(A100,), synced=False, age_seconds=None, generation=1)
    offers = build_offers(SPECS[:1], unknown, (), admit_without_capacity=True)
    view = offers_for(ALICE, offers, AccessRules.from_config([], []))
    profiles, _ = merge_profiles([], view.offers)
    for p in profiles:
        p.setdefault("profile_options", {})
    plan = plan_spawn(SpawnRequest({"profile": "gpu", "gpu_pool": A100.id}, profiles, view, ALICE), POLICY)
    assert fill_pod(plan, pod(), POLICY).reservation is None
