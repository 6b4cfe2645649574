"""The simulated dcgm-exporter's text: NVIDIA's metric names, labels and value formats; who gets the pod labels."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from testcluster.node.dcgm_exporter import render

HOLDER = {"pod": "jupyter-alice", "namespace": "jupyterhub", "container": "notebook", "deviceId": "GPU-a"}
REPORT = {
    "node": "node-1", "driverVersion": "535.183.01",
    "gpus": [
        {"index": 0, "uuid": "GPU-a", "device": "nvidia0", "modelName": "NVIDIA A100-SXM4-40GB",
         "pciBusId": "00000000:10:00.0", "instances": [], "holders": [HOLDER],
         "fields": {"DCGM_FI_DEV_GPU_UTIL": 37, "DCGM_FI_DEV_FB_FREE": 40448, "DCGM_FI_DEV_FB_USED": 512,
                    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.37}},
        {"index": 1, "uuid": "GPU-m", "device": "nvidia1", "modelName": "NVIDIA A100-SXM4-80GB",
         "pciBusId": "00000000:11:00.0", "holders": [], "fields": {},
         "instances": [{"gpuInstanceId": 3, "profile": "1g.10gb", "uuid": "MIG-x", "holders": [],
                        "fields": {"DCGM_FI_DEV_FB_FREE": 9728, "DCGM_FI_DEV_FB_USED": 0,
                                   "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.0}}]},
    ],
}


def test_a_series_line_is_exactly_the_exporters():
    text = render(REPORT, "node-1")
    assert ('DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-a",pci_bus_id="00000000:10:00.0",device="nvidia0",'
            'modelName="NVIDIA A100-SXM4-40GB",Hostname="node-1",DCGM_FI_DRIVER_VERSION="535.183.01",'
            'container="notebook",namespace="jupyterhub",pod="jupyter-alice"} 0.370000') in text.splitlines()
    assert "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %)." in text
    assert "# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge" in text


def test_prometheus_parses_it_and_mig_instances_carry_their_labels_and_no_utilisation():
    families = {f.name: f for f in text_string_to_metric_families(render(REPORT, "node-1"))}
    assert set(families) == {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED",
                             "DCGM_FI_PROF_GR_ENGINE_ACTIVE"}
    util = families["DCGM_FI_DEV_GPU_UTIL"].samples
    assert [(s.labels["gpu"], s.value) for s in util] == [("0", 37.0)]  # none for the GPU in MIG mode
    mig = [s for s in families["DCGM_FI_PROF_GR_ENGINE_ACTIVE"].samples if "GPU_I_ID" in s.labels]
    assert [(s.labels["GPU_I_PROFILE"], s.labels["GPU_I_ID"], s.labels["UUID"]) for s in mig] == [
        ("1g.10gb", "3", "GPU-m")]  # UUID stays the parent GPU's


def test_without_kubernetes_mapping_there_are_no_pod_labels():
    for family in text_string_to_metric_families(render(REPORT, "node-1", kubernetes=False)):
        for s in family.samples:
            assert not {"pod", "namespace", "container"} & set(s.labels)


SHARED = {"node": "n", "driverVersion": "", "gpus": [
    {"index": 0, "uuid": "GPU-s", "device": "nvidia0", "modelName": "Tesla T4", "pciBusId": "", "instances": [],
     "fields": {"DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.5},
     "holders": [{"pod": "a", "namespace": "ns", "container": "c"}, {"pod": "b", "namespace": "ns", "container": "c"}]},
]}


@pytest.mark.parametrize("virtual, pods", [
    (False, [("b", None)]),  # one pod per device: the last the kubelet lists
    (True, [("a", "0"), ("b", "1")]),  # KUBERNETES_VIRTUAL_GPUS: every sharing pod, device-wide value
], ids=["default", "virtual-gpus"])
def test_a_time_sliced_gpu_is_labelled_as_the_exporter_does(virtual, pods):
    (family,) = text_string_to_metric_families(render(SHARED, "n", virtual_gpus=virtual))
    assert [(s.labels["pod"], s.labels.get("vgpu")) for s in family.samples] == pods
    assert {s.value for s in family.samples} == {0.5}
