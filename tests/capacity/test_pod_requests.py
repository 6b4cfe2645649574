import pytest

from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.capacity.pod_requests import PodRecord, pod_counts, pod_record, pod_usage

from tests.builders import container, pod

IS_GPU = CapacityConfig().is_gpu_resource
G = "nvidia.com/gpu"


@pytest.mark.parametrize(
    "spec, expected",
    [
        ({"containers": [container(limits={G: "2"})]}, {G: 2}),
        ({"containers": [container(requests={G: "1"}, limits={G: "1"})]}, {G: 1}),
        ({"containers": [container(limits={G: "1"}), container("b", limits={G: "2"})]}, {G: 3}),
        ({"containers": [container(limits={"cpu": "4", "memory": "1Gi"})]}, {}),
        # a big init container dominates the app containers
        (
            {"initContainers": [container("i", limits={G: "4"})], "containers": [container(limits={G: "1"})]},
            {G: 4},
        ),
        # a small init container does not add to them
        (
            {"initContainers": [container("i", limits={G: "1"})], "containers": [container(limits={G: "2"})]},
            {G: 2},
        ),
        # a sidecar runs with the app containers: they add up
        (
            {
                "initContainers": [container("s", limits={G: "1"}, restartPolicy="Always")],
                "containers": [container(limits={G: "2"})],
            },
            {G: 3},
        ),
        # an init container after a sidecar runs next to it
        (
            {
                "initContainers": [
                    container("s", limits={G: "1"}, restartPolicy="Always"),
                    container("i", limits={G: "3"}),
                ],
                "containers": [container(limits={G: "1"})],
            },
            {G: 4},
        ),
        # ... but not next to a sidecar started after it
        (
            {
                "initContainers": [
                    container("i", limits={G: "3"}),
                    container("s", limits={G: "1"}, restartPolicy="Always"),
                ],
                "containers": [container(limits={G: "1"})],
            },
            {G: 3},
        ),
        # MIG mixed: several resources
        (
            {"containers": [container(limits={"nvidia.com/mig-1g.10gb": "1", "amd.com/gpu": "1"})]},
            {"nvidia.com/mig-1g.10gb": 1, "amd.com/gpu": 1},
        ),
        ({"containers": [container(limits={G: "1"})], "overhead": {G: "1"}}, {G: 2}),
        ({"containers": [container(limits={G: "zwei"})]}, {}),
        ({"containers": [container(limits={G: "0"})]}, {}),
    ],
    ids=[
        "limits-only",
        "requests-and-limits",
        "two-containers",
        "no-gpu",
        "init-dominates",
        "init-smaller",
        "sidecar-adds",
        "init-after-sidecar",
        "init-before-sidecar",
        "several-resources",
        "overhead",
        "bad-quantity-ignored",
        "zero",
    ],
)
def test_pod_usage_follows_the_scheduler(spec, expected):
    assert pod_usage(spec, IS_GPU) == expected


def test_requests_win_over_limits():
    # requests == limits for extended resources; if a client still sends both, requests are what counts
    assert pod_usage({"containers": [container(requests={G: "1"}, limits={G: "2"})]}, IS_GPU) == {G: 1}


@pytest.mark.parametrize(
    "obj, counts",
    [
        (pod("p", 1, "n1"), True),
        (pod("p", 1, None, phase="Pending"), False),
        (pod("p", 1, "n1", phase="Pending"), True),
        (pod("p", 1, "n1", phase="Succeeded"), False),
        (pod("p", 1, "n1", phase="Failed"), False),
        ({**pod("p", 1, "n1"), "metadata": {"name": "p", "namespace": "x", "deletionTimestamp": "2026-01-01T00:00:00Z"}}, True),
    ],
    ids=["running", "unbound", "bound-pending", "succeeded", "failed", "deleting"],
)
def test_pod_counts(obj, counts):
    assert pod_counts(obj) is counts


def test_pod_record():
    # the builder's container has a 1-CPU limit: the API server's default request
    assert pod_record(pod("a", 2, "n1"), IS_GPU) == PodRecord("jhub/a", "n1", ((G, 2),), (1000, 0, 0))
    assert pod_record(pod("a", 2), IS_GPU) == PodRecord("jhub/a", None, ((G, 2),), (1000, 0, 0))
    assert pod_record(pod("a", 0, "n1"), IS_GPU) is None
    assert pod_record(pod("a", 1, "n1", phase="Succeeded"), IS_GPU) is None
    assert pod_record({"metadata": {}}, IS_GPU) is None
