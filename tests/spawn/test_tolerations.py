"""The taint policy (gpuspawner.spawn.tolerations): which taints a GPU server may tolerate, and
Kubernetes' own rule for whether a toleration tolerates a taint.  Pure."""

from __future__ import annotations

import pytest

from gpuspawner.capacity.model import Taint
from gpuspawner.spawn.tolerations import (
    DEFAULT_TOLERATED_TAINT_KEYS as DEFAULT_KEYS,
    keeps_pods_off,
    refused_by_taint,
    taint_key_allowed,
    toleration_for,
    tolerates,
    untolerated_taints,
)
from tests.builders import pool_view

GKE_TAINT = Taint("nvidia.com/gpu", "present", "NoSchedule")
EKS_TAINT = Taint("nvidia.com/gpu", None, "NoSchedule")
CORDON = Taint("node.kubernetes.io/unschedulable", None, "NoSchedule")
SITE = Taint("example.com/team", "ml", "NoSchedule")


@pytest.mark.parametrize(
    "key, allowed, verdict",
    [
        ("nvidia.com/gpu", DEFAULT_KEYS, True),
        ("node.kubernetes.io/unreachable", ("*",), False),
        ("node.kubernetes.io/unreachable", ("node.kubernetes.io/unreachable",), False),
        ("", ("*",), False),
        ("example.com/a", ("example.com/*",), True),
        ("example.com/a", (), False),
    ],
    ids=["default", "lifecycle-glob", "lifecycle-exact", "empty-key", "glob", "nothing-allowed"],
)
def test_taint_key_allowed(key, allowed, verdict):
    assert taint_key_allowed(key, allowed) is verdict


def test_toleration_for_valueless_taint_uses_exists_with_key():
    assert toleration_for(EKS_TAINT) == {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def test_untolerated_hard_taints_are_reported_but_not_kubernetes_own():
    p = pool_view(taints=(GKE_TAINT, SITE, CORDON, Taint("example.com/soft", None, "PreferNoSchedule")))
    assert untolerated_taints(p, DEFAULT_KEYS) == (SITE,)


@pytest.mark.parametrize(
    "toleration, taint, verdict",
    [
        ({"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}, GKE_TAINT, True),
        ({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}, GKE_TAINT, True),  # Equal by default
        ({"key": "nvidia.com/gpu", "operator": "Equal", "value": "other"}, GKE_TAINT, False),
        ({"key": "nvidia.com/gpu", "operator": "Exists"}, GKE_TAINT, True),  # any effect, any value
        ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}, GKE_TAINT, False),
        ({"key": "nvidia.com/gpu", "operator": "Equal"}, EKS_TAINT, True),  # no value equals no value
        ({"operator": "Exists"}, SITE, True),  # empty key with Exists tolerates everything
        ({"key": "example.com/other", "operator": "Exists"}, SITE, False),
        ({"key": "example.com/team", "operator": "Lt", "value": "x"}, SITE, False),  # unknown operator
    ],
    ids=["equal", "default-operator", "other-value", "exists", "other-effect", "no-value", "wildcard", "other-key",
         "unknown-operator"],
)
def test_tolerates_follows_kubernetes(toleration, taint, verdict):
    assert tolerates(toleration, taint) is verdict


def test_a_taints_own_toleration_tolerates_it():
    for taint in (GKE_TAINT, EKS_TAINT, SITE):
        assert tolerates(toleration_for(taint), taint)


@pytest.mark.parametrize(
    "taint, verdict",
    [(GKE_TAINT, True), (Taint("x", None, "NoExecute"), True), (Taint("x", None, "PreferNoSchedule"), False),
     (CORDON, False), (Taint("node.cloudprovider.kubernetes.io/uninitialized", "true", "NoSchedule"), False)],
    ids=["noschedule", "noexecute", "prefer", "cordoned", "cloud-uninitialized"],
)
def test_keeps_pods_off(taint, verdict):
    assert keeps_pods_off(taint) is verdict


SKU = Taint("sku", "gpu", "NoSchedule")
TEAM_NOEXEC = Taint("example.com/team", "ml", "NoExecute")
WITHOUT_SKU = ("nvidia.com/gpu", "amd.com/gpu")
SKU_WORDS = ("its nodes carry the taint sku=gpu:NoSchedule, which this server does not tolerate; an administrator "
             "can allow it with c.GPUSpawner.gpu_tolerated_taint_keys (add 'sku') or remove the taint")


@pytest.mark.parametrize(
    "pool, allowed, words",
    [
        # every node refused (no contributing node, no GPU counted): the taint and the key to add
        (pool_view("t4", "Tesla-T4", nodes=0, total=0, free=0, taints=(SKU,)), WITHOUT_SKU, SKU_WORDS),
        (pool_view("t4", "Tesla-T4", nodes=0, total=0, free=0, taints=(SKU, TEAM_NOEXEC)), WITHOUT_SKU,
         "its nodes carry the taints example.com/team=ml:NoExecute, sku=gpu:NoSchedule, which this server does "
         "not tolerate; an administrator can allow them with c.GPUSpawner.gpu_tolerated_taint_keys (add "
         "'example.com/team' and 'sku') or remove the taints"),
        # the key is allowed: the pool is empty for another reason (its nodes are cordoned, say)
        (pool_view("t4", "Tesla-T4", nodes=0, total=0, free=0, taints=(SKU,)), DEFAULT_KEYS, None),
        # only steering, or Kubernetes' own node-condition taint: not a refusal by taint
        (pool_view("t4", "Tesla-T4", nodes=0, total=0, free=0, taints=(Taint("sku", "gpu", "PreferNoSchedule"),)),
         WITHOUT_SKU, None),
        (pool_view("t4", "Tesla-T4", nodes=0, total=0, free=0, taints=(CORDON,)), WITHOUT_SKU, None),
        # some nodes take servers: the pool's GPUs are those, and the page counts them
        (pool_view("t4", "Tesla-T4", nodes=1, total=1, free=1, taints=(SKU,)), WITHOUT_SKU, None),
    ],
    ids=["one-taint", "two-taints", "key-allowed", "prefer-no-schedule", "cordoned", "some-nodes-count"],
)
def test_refused_by_taint_names_the_taint_and_the_key_to_allow(pool, allowed, words):
    assert refused_by_taint(pool, allowed) == words
