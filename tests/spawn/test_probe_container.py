"""gpuspawner.spawn.probe_container: the on-node probe's init container, and its failure read back
from the pod. Pure."""

from __future__ import annotations

import json

import pytest

from gpuspawner.cuda import image_cuda
from gpuspawner.spawn.probe_container import PROBE_CONTAINER, probe_args, probe_container, probe_failure

IMG = image_cuda("12.4", name="pytorch:24.05")
CPU = image_cuda(None, name="scipy-notebook")


def test_probe_container_asks_for_the_same_gpus_and_passes_the_image():
    img = image_cuda({"cuda": "12.4", "require": "cuda>=12.4 brand=tesla,driver>=535", "compat": "12.8"}, name="x")
    c = probe_container(img, 2, "nvidia.com/gpu", "forward", "probe:1")
    assert c["name"] == PROBE_CONTAINER and c["image"] == "probe:1"
    assert c["command"] == ["gpuspawner"]
    assert c["args"] == ["probe", "--expect-gpus", "2", "--policy", "forward",
                         "--report", "/dev/termination-log", "--cuda", "12.4",
                         "--require", "cuda>=12.4 brand=tesla,driver>=535", "--compat", "12.8"]
    assert c["resources"] == {"limits": {"nvidia.com/gpu": "2"}, "requests": {"nvidia.com/gpu": "2"}}
    assert c["env"] == [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]
    assert c["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert probe_args(CPU, 1, "minor") == ["probe", "--expect-gpus", "1", "--policy", "minor",
                                           "--report", "/dev/termination-log"]


@pytest.mark.parametrize(
    "resource, product, expected",
    [
        ("nvidia.com/gpu", "NVIDIA-A100-SXM4-80GB", 4),
        ("nvidia.com/gpu", "Tesla-T4-SHARED", 1),
        ("nvidia.com/gpu.shared", "Tesla-T4", 1),
        ("nvidia.com/mig-1g.10gb", "NVIDIA-A100-SXM4-80GB", 1),
        ("nvidia.com/gpu", "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", 1),
        ("nvidia.com/gpu", None, 4),
    ],
    ids=["whole-gpus", "time-sliced", "shared-resource", "mig-mixed", "mig-single", "unknown-product"],
)
def test_probe_expects_only_the_gpus_certain_to_be_visible(resource, product, expected):
    c = probe_container(IMG, 4, resource, "minor", "img", product=product)
    assert c["args"][1:3] == ["--expect-gpus", str(expected)]
    assert c["resources"]["limits"] == {resource: "4"}


def test_probe_args_are_accepted_by_the_probe_command():
    import argparse

    from gpuspawner.commands import probe

    parser = argparse.ArgumentParser()
    probe.add_arguments(parser)
    img = image_cuda({"cuda": "12.4", "require": ["cuda>=12.4", "brand=tesla,driver>=535"], "compat": True})
    args = parser.parse_args(probe_args(img, 4, "strict")[1:])
    assert (args.expect_gpus, args.policy, args.cuda, args.require, args.compat) == (
        4, "strict", "12.4", ["cuda>=12.4", "brand=tesla,driver>=535"], "12.4")


NO_DRIVER = ("no NVIDIA driver is visible in the container: is the NVIDIA device plugin / container runtime "
             "set up on node gpu-3?")
REPORT = json.dumps({"ok": False, "level": "fail", "check": "driver", "message": NO_DRIVER})


def pod(state=None, last=None, name=PROBE_CONTAINER, node="gpu-3"):
    cs = {"name": name, "state": state or {"waiting": {"reason": "PodInitializing"}}, "lastState": last or {}}
    return {"spec": {"nodeName": node}, "status": {"phase": "Pending", "initContainerStatuses": [cs]}}


def term(code, message=None, reason="Error"):
    t = {"exitCode": code, "reason": reason}
    if message is not None:
        t["message"] = message
    return {"terminated": t}


@pytest.mark.parametrize(
    "the_pod, expected",
    [
        (pod(term(1, REPORT)), f"The GPU check on node gpu-3 failed before your server started: {NO_DRIVER}"),
        (pod({"waiting": {"reason": "CrashLoopBackOff"}}, term(1, REPORT)), NO_DRIVER),
        (pod(term(1, f"probe: cannot write the report to /x (Permission denied); here it is:\n{REPORT}\n"
                     f"gpuspawner probe: failed: {NO_DRIVER}")), NO_DRIVER),
        (pod(term(1, "gpuspawner probe: failed: only 1 of 2 GPUs")), "failed before your server started: only 1 of 2 GPUs"),
        (pod(term(1, "Traceback ...\nImportError: no pynvml")), "it exited with status 1: Traceback ...\nImportError"),
        (pod(term(128, 'exec: "gpuspawner": executable file not found in $PATH', "StartError")),
         "its image (img:1) cannot start `gpuspawner probe` (exec: \"gpuspawner\""),
    ],
    ids=["report", "crash-loop-last-state", "report-in-log-tail", "human-line", "no-report", "not-installed"],
)
def test_probe_failure_message(the_pod, expected):
    assert expected in probe_failure(the_pod, "img:1")


@pytest.mark.parametrize(
    "the_pod",
    [pod(), pod(term(0, json.dumps({"ok": True, "message": "fine"}))), pod(term(1, REPORT), name="admin-init"),
     {"status": {}}, {}],
    ids=["pending", "succeeded", "other-container", "no-statuses", "empty"],
)
def test_no_probe_failure(the_pod):
    assert probe_failure(the_pod) is None
