import pytest

from gpuspawner.capacity.config import DeclaredPool
from gpuspawner.doctor.checks.scaleup import check_scale_up
from gpuspawner.doctor.facts import HubFacts


def declared(minutes):
    return DeclaredPool.from_config({
        "resource": "nvidia.com/gpu", "product": "NVIDIA-H100-80GB-HBM3",
        "node_group_label": "cloud.google.com/gke-nodepool", "node_group": "h100",
        "gpus_per_node": 8, "max_nodes": 2, "minutes": minutes})


@pytest.mark.parametrize(
    "minutes, pull, most, expected",
    [
        (7, 600, 3600, []),  # the spawner raises start_timeout to 1020 s itself
        (55, 600, 3600, ["scale-up-too-slow"]),
        (7, 600, 900, ["scale-up-too-slow"]),
    ],
    ids=["within-bound", "slower-than-the-bound", "bound-lowered"],
)
def test_check_scale_up(minutes, pull, most, expected):
    hub = HubFacts(tolerated_taint_keys=(), start_timeout=180, image_pull_seconds=pull, start_timeout_max=most)
    found = check_scale_up([declared(minutes)], hub)
    assert [f.id for f in found] == expected
    for f in found:
        assert f"scale-up of about {minutes:g} minutes" in f.summary and "gpu_start_timeout_max" in f.fix
        assert f.details["needed_seconds"] == minutes * 60 + pull
