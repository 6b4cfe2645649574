"""The profiles of the two hubs ``benchmarks/hub.py`` compares (read by ``hub_config.py``).

The GPU hub's config is like the demo's (``gpuspawner/data/demo/jupyterhub_config.py``): a CPU
profile, a GPU profile whose two image choices declare CUDA, allowed groups on the profile and
on the MIG pools, per-group GPU quotas. The static hub gets a ``profile_list`` of the same size
for plain KubeSpawner: the same CPU profile and image choices, one ``gpu_pool`` choice per GPU
pool of the benchmark's cluster (pinned by the labels that define the pool, with one GPU, as
an admin without gpuspawner would write it) and ``gpus`` choices 1 to 8. The pool choices pin
with the same required node affinity GPUSpawner gives its pods, so that both hubs' pods cost
the scheduler the same, and the spawn-time ratio is the spawners'.
"""

from __future__ import annotations

import copy
import random
from typing import Any

from bigcluster import GPU_TAINT, POOLS, make_node

A100_POOL = "a100:nvidia-a100-sxm4-80gb:nvidia.com/gpu"  # where the benchmark's spawns go

CPU_PROFILE = {
    "slug": "cpu",
    "display_name": "CPU only",
    "description": "2 CPUs and 4 GiB of memory, no GPU.",
    "default": True,
    "kubespawner_override": {"cpu_limit": 2, "mem_limit": "4G"},
}
GPU_OVERRIDE = {"image": "quay.io/jupyter/pytorch-notebook:cuda12-2025-01-06", "cpu_limit": 8, "mem_limit": "32G"}


def image_option(declare_cuda: bool) -> dict[str, Any]:
    """The image choices; GPUSpawner's declare the CUDA each image carries."""
    cuda11: dict[str, Any] = {
        "display_name": "PyTorch (CUDA 11.8)",
        "kubespawner_override": {"image": "pytorch/pytorch:2.3.1-cuda11.8-cudnn8-runtime"},
    }
    if declare_cuda:
        cuda11["cuda"] = "11.8"
    return {"display_name": "Image",
            "choices": {"cuda12": {"display_name": "PyTorch (CUDA 12.4)", "default": True}, "cuda11": cuda11}}


def gpu_settings() -> dict[str, Any]:
    """``c.GPUSpawner`` settings of the GPU hub."""
    return {
        "profile_list": [copy.deepcopy(CPU_PROFILE)],
        "gpu_profiles": [{
            "slug": "gpu",
            "display_name": "GPU server",
            "description": "PyTorch on the GPU pool you choose.",
            "kubespawner_override": dict(GPU_OVERRIDE),
            "cuda": "12.4",
            "max_gpus": 8,
            "allowed_groups": ["ml", "staff"],
            "profile_options": {"image": image_option(True)},
        }],
        "gpu_pool_rules": [
            {"match": "*:nvidia.com/mig-*", "allowed_groups": ["ml"]},
            {"match": "mi300:*", "display_name": "AMD MI300X (ROCm images only)"},
        ],
        "gpu_quota": 2,
        "gpu_quota_by_group": {"ml": 16},
    }


def pool_choices() -> dict[str, dict]:
    """One static choice per GPU pool of the benchmark's cluster, keyed by GPUSpawner's pool id."""
    from gpuspawner.capacity.config import CapacityConfig
    from gpuspawner.capacity.labels import node_record

    choices: dict[str, dict] = {}
    config = CapacityConfig()
    rnd = random.Random(0)
    for name, _share, _resources, _labels in POOLS:
        obj, _ = make_node(0, rnd)
        while not obj["metadata"]["name"].startswith(f"{name}-"):
            obj, _ = make_node(0, rnd)
        rec = node_record(obj, config)
        for g in rec.gpus:
            choices[g.pool_id] = {
                "display_name": f"{g.product} ({rec.node_group})",
                "kubespawner_override": {
                    "node_affinity_required": [{"matchExpressions": [
                        {"key": key, "operator": "In", "values": [value]} for key, value in sorted(g.defining_labels)
                    ]}],
                    "tolerations": [dict(GPU_TAINT, operator="Equal")],
                    "extra_resource_limits": {g.resource: "1"},
                    "extra_resource_guarantees": {g.resource: "1"},
                },
            }
    return choices


def static_profile_list() -> list[dict[str, Any]]:
    """``c.KubeSpawner.profile_list`` of the static hub."""
    return [copy.deepcopy(CPU_PROFILE), {
        "slug": "gpu",
        "display_name": "GPU server",
        "description": "PyTorch on the GPU pool you choose.",
        "kubespawner_override": dict(GPU_OVERRIDE),
        "profile_options": {
            "image": image_option(False),
            "gpu_pool": {"display_name": "GPU pool", "choices": pool_choices()},
            "gpus": {"display_name": "GPUs",
                     "choices": {str(n): {"display_name": f"{n} GPU{'s' if n > 1 else ''}"} for n in range(1, 9)}},
        },
    }]
