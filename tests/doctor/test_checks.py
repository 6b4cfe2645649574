"""The pure doctor rules: findings from Node/Pod dicts, hub facts and RBAC facts."""

from __future__ import annotations

import json

import pytest

from gpuspawner.kube.times import parse_duration
from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.cuda.image import image_cuda
from gpuspawner.doctor import checks, findings, report
from gpuspawner.doctor.facts import HubFacts, ProfileImage, hub_facts_from_values
from gpuspawner.doctor.findings import Finding
from gpuspawner.doctor.rbac import REQUIRED_RBAC, RbacCheck, RbacFacts
from gpuspawner.spawn.taints import DEFAULT_TOLERATED_TAINT_KEYS

CONFIG = CapacityConfig()
NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
DEFAULT_HUB = HubFacts(tolerated_taint_keys=DEFAULT_TOLERATED_TAINT_KEYS)

GFD_A100 = {
    "nvidia.com/cuda.driver-version.full": "570.172.08",
    "nvidia.com/cuda.runtime-version.full": "12.8",
    "nvidia.com/gpu.compute.major": "8",
    "nvidia.com/gpu.compute.minor": "0",
    "nvidia.com/gpu.count": "4",
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
}
GFD_T4_470 = {
    "nvidia.com/cuda.driver-version.full": "470.256.02",
    "nvidia.com/cuda.runtime-version.full": "11.4",
    "nvidia.com/gpu.compute.major": "7",
    "nvidia.com/gpu.compute.minor": "5",
    "nvidia.com/gpu.count": "1",
    "nvidia.com/gpu.product": "Tesla-T4",
}


def node(name="gpu-0", labels=None, allocatable=None, capacity=None, taints=None, ready="True",
         unschedulable=False, reason=None, message=None):
    alloc = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    alloc.update(allocatable or {})
    cond = {"type": "Ready", "status": ready}
    if reason:
        cond["reason"] = reason
    if message:
        cond["message"] = message
    status = {"allocatable": alloc, "conditions": [cond] if ready is not None else []}
    if capacity is not None:
        status["capacity"] = {**alloc, **capacity}
    spec = {}
    if taints:
        spec["taints"] = taints
    if unschedulable:
        spec["unschedulable"] = True
    return {"metadata": {"name": name, "labels": dict(labels or {})}, "spec": spec, "status": status}


def gpu_node(name="gpu-0", n=4, labels=GFD_A100, **kw):
    return node(name, labels, {"nvidia.com/gpu": str(n)}, **kw)


def ids(findings):
    return sorted(f.id for f in findings)


# ---------------------------------------------------------------------------
# nodes


@pytest.mark.parametrize(
    "nodes, expected",
    [
        pytest.param([gpu_node()], [], id="healthy-gpu-node"),
        pytest.param(
            [node(labels={"feature.node.kubernetes.io/pci-10de.present": "true"}), gpu_node("ok")],
            ["gpu-node-no-allocatable"], id="nfd-nvidia-no-allocatable",
        ),
        pytest.param(
            [node(labels={"nvidia.com/gpu.present": "true"}, allocatable={"nvidia.com/gpu": "0"})],
            ["gpu-node-no-allocatable"], id="operator-label-zero-allocatable",
        ),
        pytest.param(
            [node(labels={"feature.node.kubernetes.io/pci-1002.present": "true"})],
            ["gpu-node-no-allocatable"], id="amd-pci-no-allocatable",
        ),
        pytest.param(
            [node(capacity={"nvidia.com/gpu": "8"}, allocatable={"nvidia.com/gpu": "0"})],
            ["gpu-node-no-allocatable"], id="unhealthy-gpus-capacity-only",
        ),
        pytest.param(
            [node(labels={"nvidia.com/mig.strategy": "mixed", **GFD_A100},
                  allocatable={"nvidia.com/mig-1g.10gb": "7"})],
            [], id="mig-mixed-counts-as-allocatable",
        ),
        pytest.param(
            [node(labels={"feature.node.kubernetes.io/pci-10de.present": "false"})],
            ["no-gpu-nodes"], id="nfd-label-false-is-not-a-gpu",
        ),
        pytest.param([node("cpu-0")], ["no-gpu-nodes"], id="cpu-only-cluster"),
        pytest.param([gpu_node(ready="False", reason="KubeletNotReady")], ["gpu-node-not-ready"], id="not-ready"),
        pytest.param([gpu_node(ready="Unknown")], ["gpu-node-not-ready"], id="unreachable"),
        pytest.param([gpu_node(ready=None)], ["gpu-node-not-ready"], id="no-ready-condition"),
        pytest.param([gpu_node(unschedulable=True)], ["gpu-node-cordoned"], id="cordoned"),
        pytest.param([node("cpu-0", unschedulable=True, ready="False"), gpu_node()], [], id="cpu-node-state-ignored"),
    ],
)
def test_check_nodes(nodes, expected):
    assert ids(checks.check_nodes(nodes, CONFIG)) == expected


def test_no_allocatable_fix_names_the_operator_deploy_label():
    n = node("gpu-x", labels={"nvidia.com/gpu.present": "true", "nvidia.com/gpu.deploy.device-plugin": "false"})
    (f,) = checks.check_nodes([n], CONFIG)
    assert f.severity == "error"
    assert f.objects[0].name == "gpu-x"
    assert "kubectl label node gpu-x nvidia.com/gpu.deploy.device-plugin=true --overwrite" in f.fix


def test_not_ready_reports_the_kubelet_reason_and_a_command():
    (f,) = checks.check_nodes([gpu_node(ready="False", reason="KubeletNotReady", message="PLEG is not healthy")],
                              CONFIG)
    assert "KubeletNotReady" in f.summary and "PLEG is not healthy" in f.summary
    assert f.fix.startswith("kubectl describe node gpu-0")


def test_cordoned_fix_is_uncordon():
    (f,) = checks.check_nodes([gpu_node("g7", unschedulable=True)], CONFIG)
    assert f.severity == "warning" and "kubectl uncordon g7" in f.fix


def test_custom_gpu_resource_is_recognised():
    config = CapacityConfig(gpu_resources=("example.com/gpu",))
    assert ids(checks.check_nodes([node(allocatable={"example.com/gpu": "2"})], config)) == []
    assert ids(checks.check_nodes([node(allocatable={"example.com/gpu": "2"})], CONFIG)) == ["no-gpu-nodes"]


# ---------------------------------------------------------------------------
# GFD labels


DEPRECATED_ONLY = {
    "nvidia.com/cuda.driver.major": "535", "nvidia.com/cuda.driver.minor": "183", "nvidia.com/cuda.driver.rev": "01",
    "nvidia.com/cuda.runtime.major": "12", "nvidia.com/cuda.runtime.minor": "2",
    "nvidia.com/gpu.product": "Tesla-T4",
}


@pytest.mark.parametrize(
    "nodes, expected",
    [
        pytest.param([gpu_node()], [], id="current-labels"),
        pytest.param([gpu_node(labels={})], ["gfd-labels-missing"], id="no-labels"),
        pytest.param([gpu_node(labels={"nvidia.com/gpu.product": "Tesla-T4"})], ["gfd-labels-missing"],
                     id="product-but-no-driver"),
        pytest.param([gpu_node(labels=DEPRECATED_ONLY)], ["gfd-labels-deprecated"], id="deprecated-names-only"),
        pytest.param([node(labels={"nvidia.com/gpu.present": "true"})], [], id="no-allocatable-left-to-node-check"),
        pytest.param([node(allocatable={"amd.com/gpu": "2"})], [], id="amd-not-judged-by-gfd"),
        pytest.param(
            [gpu_node("a", labels={"eks.amazonaws.com/nodegroup": "t4"}),
             gpu_node("b", labels={"eks.amazonaws.com/nodegroup": "t4"}),
             gpu_node("c", labels={"eks.amazonaws.com/nodegroup": "l4"})],
            ["gfd-labels-missing", "gfd-labels-missing"], id="one-finding-per-node-group",
        ),
    ],
)
def test_check_gfd_labels(nodes, expected):
    assert ids(checks.check_gfd_labels(nodes, CONFIG)) == expected


def test_gfd_missing_groups_nodes_and_lists_missing_labels():
    nodes = [gpu_node("a", labels={"eks.amazonaws.com/nodegroup": "t4"}),
             gpu_node("b", labels={"eks.amazonaws.com/nodegroup": "t4"})]
    (f,) = checks.check_gfd_labels(nodes, CONFIG)
    assert [o.name for o in f.objects] == ["a", "b"]
    assert f.details["node_group"] == "t4"
    assert "nvidia.com/gpu.product" in f.details["missing_labels"]
    assert "deploy/label-node-daemonset.yaml" in f.fix


# ---------------------------------------------------------------------------
# taints


def taint(key, effect="NoSchedule", value=None):
    t = {"key": key, "effect": effect}
    if value:
        t["value"] = value
    return t


@pytest.mark.parametrize(
    "taints, hub, expected",
    [
        pytest.param([taint("nvidia.com/gpu", value="present")], DEFAULT_HUB, [], id="gke-gpu-taint-default"),
        pytest.param([taint("sku", value="gpu")], DEFAULT_HUB, [], id="aks-sku-taint-default"),
        pytest.param([taint("dedicated", value="ml")], DEFAULT_HUB, ["untolerated-gpu-taint"], id="dedicated"),
        pytest.param([taint("dedicated", "NoExecute")], DEFAULT_HUB, ["untolerated-gpu-taint"], id="noexecute"),
        pytest.param([taint("dedicated", "PreferNoSchedule")], DEFAULT_HUB, [], id="prefer-only-steers"),
        pytest.param([taint("node.kubernetes.io/unschedulable")], DEFAULT_HUB, [], id="lifecycle-taint-ignored"),
        pytest.param([taint("dedicated", value="ml")],
                     HubFacts(tolerated_taint_keys=("dedicated",), source="c.py"), [], id="allowed-key"),
        pytest.param([taint("example.com/reserved")],
                     HubFacts(tolerated_taint_keys=("example.com/*",), source="c.py"), [], id="allowed-glob"),
        pytest.param([taint("dedicated", value="ml")],
                     HubFacts(tolerated_taint_keys=(), source="c.py",
                              tolerations=({"key": "dedicated", "operator": "Equal", "value": "ml",
                                            "effect": "NoSchedule"},)),
                     [], id="admin-toleration-equal"),
        pytest.param([taint("dedicated", value="ml")],
                     HubFacts(tolerated_taint_keys=(), source="c.py",
                              tolerations=({"key": "dedicated", "operator": "Equal", "value": "other"},)),
                     ["untolerated-gpu-taint"], id="admin-toleration-wrong-value"),
        pytest.param([taint("dedicated", value="ml")],
                     HubFacts(tolerated_taint_keys=(), source="c.py",
                              tolerations=({"key": "dedicated", "operator": "Exists", "effect": "NoExecute"},)),
                     ["untolerated-gpu-taint"], id="admin-toleration-wrong-effect"),
        pytest.param([taint("nvidia.com/gpu")], HubFacts(tolerated_taint_keys=(), source="c.py"),
                     ["untolerated-gpu-taint"], id="admin-removed-default-keys"),
    ],
)
def test_check_taints(taints, hub, expected):
    assert ids(checks.check_taints([gpu_node(taints=taints)], hub, CONFIG)) == expected


def test_taint_finding_groups_nodes_and_gives_both_fixes():
    nodes = [gpu_node("a", taints=[taint("dedicated", value="ml")]),
             gpu_node("b", taints=[taint("dedicated", value="ml")]),
             node("cpu", taints=[taint("dedicated", value="ml")])]
    (f,) = checks.check_taints(nodes, DEFAULT_HUB, CONFIG)
    assert [o.name for o in f.objects] == ["a", "b"]
    assert 'c.GPUSpawner.gpu_tolerated_taint_keys.append("dedicated")' in f.fix
    assert "kubectl taint nodes a dedicated:NoSchedule-" in f.fix
    assert "default gpu_tolerated_taint_keys" in f.summary


def test_default_tolerated_keys_match_the_spawner_trait():
    from gpuspawner.hub.spawner import GPUSpawner

    assert tuple(GPUSpawner.class_traits()["gpu_tolerated_taint_keys"].default()) == DEFAULT_TOLERATED_TAINT_KEYS


# ---------------------------------------------------------------------------
# images vs drivers


def hub_with(*images, policy="minor"):
    return HubFacts(tolerated_taint_keys=DEFAULT_TOLERATED_TAINT_KEYS, images=tuple(images),
                    cuda_policy=policy, source="jupyterhub_config.py")


def img(cuda, profile="gpu", image="img:1"):
    return ProfileImage(profile, image, image_cuda(cuda, name=image))


@pytest.mark.parametrize(
    "nodes, image, policy, expected",
    [
        pytest.param([gpu_node()], img("12.4"), "minor", [], id="backward-ok"),
        pytest.param([gpu_node(labels=GFD_T4_470)], img("12.4"), "minor", ["image-driver-mismatch"],
                     id="driver-470-cuda-12"),
        pytest.param([gpu_node("new"), gpu_node("old", labels=GFD_T4_470)], img("12.4"), "minor",
                     ["image-driver-partial"], id="one-node-too-old"),
        pytest.param([gpu_node()], img("12.9"), "minor", [], id="minor-version-is-not-a-mismatch"),
        pytest.param([gpu_node()], img("12.9"), "strict", ["image-driver-mismatch"], id="strict-refuses-mvc"),
        pytest.param([gpu_node()], img(None), "minor", [], id="cpu-image-skipped"),
        pytest.param([gpu_node(labels={})], img("12.4"), "minor", [], id="no-driver-labels-skipped"),
        pytest.param([gpu_node(labels=GFD_T4_470, ready="False")], img("12.4"), "minor", [],
                     id="not-ready-node-not-judged"),
        pytest.param([gpu_node(labels=GFD_T4_470, unschedulable=True)], img("12.4"), "minor", [],
                     id="cordoned-node-not-judged"),
        pytest.param([gpu_node(labels={**GFD_A100, "nvidia.com/gpu.compute.major": "3",
                                       "nvidia.com/gpu.compute.minor": "7"})],
                     img("13.0"), "minor", ["image-driver-mismatch"], id="arch-floor"),
    ],
)
def test_check_images(nodes, image, policy, expected):
    assert ids(checks.check_images(nodes, hub_with(image, policy=policy), CONFIG)) == expected


def test_mismatch_names_profile_image_and_driver_fix():
    (f,) = checks.check_images([gpu_node("t4", labels=GFD_T4_470)], hub_with(img("12.4", "torch", "pt:12")), CONFIG)
    assert f.severity == "error"
    assert str(f.objects[0]) == "profile/torch" and str(f.objects[1]) == "node/t4"
    assert "pt:12" in f.summary and "CUDA 12.4" in f.summary and "470.256.02" in f.summary
    assert f.details["verdicts"]["t4"]["level"] == "fail"
    assert f.fix  # the rules' own fix sentence


def test_partial_fit_names_the_pools_to_exclude():
    nodes = [gpu_node("a", labels={**GFD_A100, "cloud.google.com/gke-nodepool": "a100"}),
             gpu_node("t", labels={**GFD_T4_470, "cloud.google.com/gke-nodepool": "t4"})]
    (f,) = checks.check_images(nodes, hub_with(img("12.4")), CONFIG)
    assert (f.id, f.severity) == ("image-driver-partial", "info")  # the spawner steers off node t
    assert [str(o) for o in f.objects] == ["profile/gpu", "node/t"]
    assert f.details["pools_failing"] == ["t4:tesla-t4:nvidia.com/gpu"]
    assert '"pools": {"exclude": ["t4:tesla-t4:nvidia.com/gpu"]}' in f.fix


@pytest.mark.parametrize(
    "check",
    [
        pytest.param(lambda image, node, policy: 1 / 0, id="raises"),
        pytest.param(lambda image, node, policy: "ok", id="returns-a-string"),
    ],
)
def test_broken_cuda_check_is_reported(check):
    hub = HubFacts(tolerated_taint_keys=(), images=(img("12.4"),), cuda_check=check, source="c.py")
    (f,) = checks.check_images([gpu_node()], hub, CONFIG)
    assert (f.id, f.severity) == ("cuda-check-error", "warning")
    assert "c.GPUSpawner.cuda_check" in f.fix


def test_the_hubs_cuda_check_decides():
    from gpuspawner.cuda.rules import Verdict

    calls = []

    def never(image, node, policy):
        calls.append((image.cuda_text, node.name, node.driver, policy))
        return Verdict("fail", "site-rule", "Not on our cluster.", "Ask us.")

    hub = HubFacts(tolerated_taint_keys=(), images=(img("12.4"),), cuda_check=never, cuda_policy="strict",
                   source="c.py")
    (f,) = checks.check_images([gpu_node("g")], hub, CONFIG)
    assert f.id == "image-driver-mismatch" and "Not on our cluster." in f.summary
    assert calls == [("12.4", "g", "570.172.08", "strict")]


def test_image_check_respects_the_profile_pools():
    from gpuspawner.spawn.profiles import GPUProfileSpec

    spec = GPUProfileSpec.from_config({"slug": "a100", "pools": {"include": ["a100:*"]}})
    image = ProfileImage("a100", "pt:12", image_cuda("12.4"), spec=spec)
    nodes = [gpu_node("a", labels={**GFD_A100, "cloud.google.com/gke-nodepool": "a100"}),
             gpu_node("t", labels={**GFD_T4_470, "cloud.google.com/gke-nodepool": "t4"})]
    assert ids(checks.check_images(nodes, hub_with(image), CONFIG)) == []


# ---------------------------------------------------------------------------
# pending pods


def pod(name="jupyter-a", gpus="1", phase="Pending", scheduled="False", created=NOW - 600,
        message="0/3 nodes are available: 3 Insufficient nvidia.com/gpu.", node_name=None, resource="nvidia.com/gpu"):
    from datetime import datetime, timezone

    stamp = datetime.fromtimestamp(created, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    limits = {resource: gpus} if gpus else {"cpu": "1"}
    spec = {"containers": [{"name": "nb", "image": "x", "resources": {"limits": limits}}]}
    if node_name:
        spec["nodeName"] = node_name
    status = {"phase": phase}
    if scheduled is not None:
        status["conditions"] = [{"type": "PodScheduled", "status": scheduled, "reason": "Unschedulable",
                                 "message": message}]
    return {"metadata": {"name": name, "namespace": "jhub", "creationTimestamp": stamp}, "spec": spec,
            "status": status}


@pytest.mark.parametrize(
    "p, expected",
    [
        pytest.param(pod(), ["pod-pending-on-gpu"], id="pending-10min"),
        pytest.param(pod(created=NOW - 60), [], id="younger-than-threshold"),
        pytest.param(pod(gpus=None), [], id="cpu-pod"),
        pytest.param(pod(resource="nvidia.com/mig-1g.10gb"), ["pod-pending-on-gpu"], id="mig-slice"),
        pytest.param(pod(scheduled=None), [], id="not-yet-tried-by-scheduler"),
        pytest.param(pod(scheduled="True", node_name="gpu-0"), [], id="bound-pulling-image"),
        pytest.param(pod(phase="Running", scheduled="True", node_name="gpu-0"), [], id="running"),
    ],
)
def test_check_pending_pods(p, expected):
    assert ids(checks.check_pending_pods([p], CONFIG, NOW, 300)) == expected


@pytest.mark.parametrize(
    "message, fix_part",
    [
        ("0/3 nodes are available: 3 Insufficient nvidia.com/gpu.", "No node has 1 x nvidia.com/gpu free"),
        ("0/2 nodes are available: 2 node(s) had untolerated taint {dedicated: ml}.", "gpu_tolerated_taint_keys"),
        ("0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector.", "node affinity"),
        ("weird", "kubectl describe pod -n jhub jupyter-a"),
    ],
    ids=["insufficient", "taint", "affinity", "other"],
)
def test_pending_fix_follows_the_scheduler_message(message, fix_part):
    (f,) = checks.check_pending_pods([pod(message=message)], CONFIG, NOW, 300)
    assert message in f.summary
    assert fix_part in f.fix
    assert f.details["requests"] == {"nvidia.com/gpu": 1}
    assert f.details["age_seconds"] == 600


@pytest.mark.parametrize(
    "text, seconds",
    [("300", 300), ("300s", 300), ("5m", 300), ("1h30m", 5400), ("0", 0), ("2.5m", 150)],
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5 minutes", "-5m", "m", "5d", "h"])
def test_parse_duration_rejects(text):
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


# ---------------------------------------------------------------------------
# RBAC


def test_rbac_denied_is_an_error_with_the_clusterrole_fix():
    facts = RbacFacts("system:serviceaccount:jhub:hub", (
        RbacCheck("list", "nodes", None, False, "SubjectAccessReview"),
        RbacCheck("watch", "pods", None, False, "SubjectAccessReview"),
        RbacCheck("list", "pods", None, True, "SubjectAccessReview"),
    ))
    (f,) = checks.check_rbac(facts)
    assert f.id == "rbac-missing" and f.severity == "error"
    assert "nodes: list at the cluster scope" in f.summary and "pods: watch at the cluster scope" in f.summary
    assert "kubectl apply -f deploy/rbac.yaml" in f.fix
    assert [d["resource"] for d in f.details["denied"]] == ["nodes", "pods"]


def test_rbac_all_allowed_says_nothing_and_unknown_is_info():
    ok = RbacFacts("me", tuple(RbacCheck(v, r, None, True, "list call") for v, r in REQUIRED_RBAC))
    assert checks.check_rbac(ok) == []
    unknown = RbacFacts("me", (RbacCheck("watch", "pods", None, None, "watch call", "timeout"),))
    assert [(f.id, f.severity) for f in checks.check_rbac(unknown)] == [("checks-skipped", "info")]


def test_unlisted_nodes_skip_their_checks():
    rbac = RbacFacts("me", (RbacCheck("list", "nodes", None, False, "list call"),))
    found = checks.run_checks(None, [], config=CONFIG, hub=DEFAULT_HUB, rbac=rbac, now=NOW, pending_after=300)
    assert [f.id for f in found] == ["rbac-missing", "checks-skipped", "profile-checks-skipped"]
    assert findings.exit_code(found) == 1


# ---------------------------------------------------------------------------
# hub facts from config values


BASE_VALUES = {
    "gpu_profiles": [],
    "gpu_tolerated_taint_keys": list(DEFAULT_TOLERATED_TAINT_KEYS),
    "tolerations": [],
    "image": "quay.io/jupyterhub/singleuser:latest",
    "profile_list": [],
}


def values(**kw):
    return {**BASE_VALUES, **kw}


def test_hub_facts_profile_and_choice_images():
    v = values(gpu_profiles=[
        {"slug": "gpu", "cuda": "12.4", "kubespawner_override": {"image": "pt:cuda12"}},
        {"slug": "pick", "profile_options": {"image": {"display_name": "Image", "choices": {
            "tf": {"display_name": "TF", "cuda": {"cuda": "12.2"}, "kubespawner_override": {"image": "tf:2"}},
            "cpu": {"display_name": "CPU", "kubespawner_override": {"image": "base:1"}},
        }}}},
        {"slug": "plain"},
    ], tolerations=[{"key": "dedicated", "operator": "Exists"}])
    hub = hub_facts_from_values(v, source="c.py")
    assert hub.cuda_policy == "minor"
    got = [(i.label, i.image, i.cuda.cuda_text) for i in hub.images]
    assert got == [
        ("gpu", "pt:cuda12", "12.4"),
        ("pick (image:tf)", "tf:2", "12.2"),
        ("pick (image:cpu)", "base:1", None),
        ("plain", "quay.io/jupyterhub/singleuser:latest", None),
    ]
    assert hub.profiles == ("gpu", "pick", "plain")
    assert hub.tolerations == ({"key": "dedicated", "operator": "Exists"},)


@pytest.mark.parametrize(
    "bad, match",
    [
        ({"gpu_profiles": [{"slug": "g", "cuda": 12.4}]}, r"gpu_profiles\[0\] \(slug 'g'\): 'cuda':.*quoted string"),
        ({"gpu_profiles": [{"slug": "g", "cuda": {"cdua": "12"}}]}, "unknown key"),
        ({"gpu_profiles": [{"slug": "g", "profile_options": {"img": {"choices": {"a": {"cuda": "12.4"}}}}}]},
         "sets no image"),
        ({"cuda_policy": "lenient"}, "cuda_policy must be one of"),
        ({"gpu_profiles": [{"slug": "g", "colour": "red"}]}, "unknown key"),
        ({"gpu_profiles": "gpu"}, "must be a list"),
        ({"gpu_tolerated_taint_keys": "nvidia.com/gpu"}, "list of strings"),
        ({"tolerations": "nvidia.com/gpu"}, "tolerations must be a list"),
    ],
    ids=["cuda-float", "cuda-typo", "choice-cuda-without-image", "bad-policy", "profile-typo", "profiles-not-list",
         "keys-not-list", "tolerations-bad"],
)
def test_hub_facts_errors_name_the_setting(bad, match):
    with pytest.raises(ValueError, match=match):
        hub_facts_from_values(values(**bad), source="c.py")


# ---------------------------------------------------------------------------
# output


def test_exit_code_and_report_shapes():
    info = Finding("profile-checks-skipped", "info", "s", "f")
    warn = Finding("gpu-node-cordoned", "warning", "node g is cordoned", "kubectl uncordon g",
                   (findings.ObjectRef("Node", "g"),))
    assert findings.exit_code([info]) == 0
    assert findings.exit_code([info, warn]) == 1
    doc = json.loads(report.render_json([warn, info], {"server": "http://x"}))
    assert doc["summary"] == {"errors": 0, "warnings": 1, "info": 1, "ok": False, "exit_code": 1,
                              "server": "http://x"}
    assert doc["findings"][0] == {"id": "gpu-node-cordoned", "severity": "warning", "summary": "node g is cordoned",
                                  "fix": "kubectl uncordon g",
                                  "objects": [{"kind": "Node", "name": "g", "namespace": None}], "details": {}}
    text = report.render_text([warn, info], {"server": "http://x", "nodes": 3})
    assert text.index("WARNINGS (1)") < text.index("INFO (1)")
    assert "[gpu-node-cordoned] node g is cordoned" in text and "fix: kubectl uncordon g" in text
    assert "objects: node/g" in text
    assert report.render_text([info]).endswith("No problems found (1 note).")


def test_every_id_is_documented():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "troubleshooting.md").read_text()
    missing = [i for i in findings.FINDING_IDS if f"`{i}`" not in doc]
    assert missing == []


def test_rules_and_report_import_no_hub_and_no_client():
    """checks and report are pure (docs/architecture.md): importing them pulls in
    neither JupyterHub nor a Kubernetes/HTTP client."""
    import subprocess
    import sys

    code = (
        "import sys, gpuspawner.doctor.checks, gpuspawner.doctor.report\n"
        "heavy = ('jupyterhub', 'kubespawner', 'kubernetes_asyncio', 'aiohttp', 'traitlets')\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & set(heavy)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"
