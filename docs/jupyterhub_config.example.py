# A complete jupyterhub_config.py for a JupyterHub with GPU notebooks on a real Kubernetes cluster.
#
# Works on GKE, EKS, AKS and self-managed clusters: GPU pools are discovered from the cluster (GPU
# nodes, their NVIDIA GPU Feature Discovery labels, their node-group label), so nothing here names a
# node. Edit the pool ids, groups and images to your cluster (`GET /hub/api/gpus` lists your pool ids;
# `gpuspawner doctor --config jupyterhub_config.py` checks this file against the cluster).
#
# Use it as your jupyterhub_config.py, or with the Zero to JupyterHub chart (docs/zero-to-jupyterhub.md)
# mount it with hub.extraFiles into /usr/local/etc/jupyterhub/jupyterhub_config.d/ (the chart sets
# the hub's address, database and secrets itself; this file sets none of them). Every setting:
# docs/traits.md; each topic in depth: docs/configuration.md. tests/test_docs.py loads this file
# both ways.
import os

# traitlets gives this file `c` (and get_config()) when JupyterHub loads it. The Zero to JupyterHub
# chart also gives `c` when it runs a file from jupyterhub_config.d, but there `get_config` is the
# chart's own z2jh.get_config(key) (jupyterhub/files/hub/jupyterhub_config.py imports it over
# traitlets' one), so this file takes `c` as given instead of calling get_config().
c = globals()["c"]

# --- 1. Select GPUSpawner and register GET /hub/api/gpus: gpuspawner's snippet ----------------------
# It ships inside the package (pip also copies it to <prefix>/share/gpuspawner/jupyterhub_config.d/).
# It sets c.JupyterHub.spawner_class = "gpu" and adds the handler.
from gpuspawner import config_snippet  # noqa: E402

_snippet = config_snippet()
load_subconfig(str(_snippet))  # noqa: F821 - provided by traitlets

# --- 2. Hub settings gpuspawner works with -------------------------------------------------------
c.JupyterHub.allow_named_servers = True  # a user may run a CPU and a GPU server side by side
c.JupyterHub.named_server_limit_per_user = 3

# Who may log in is your authenticator's business (OAuthenticator, LDAP...). gpuspawner reads only
# JupyterHub groups (allowed_groups, quotas by group) and the admin flag. Groups may come from the
# authenticator (c.Authenticator.manage_groups = True) or be loaded here:
c.JupyterHub.load_groups = {
    "gpu-users": {"users": []},  # the people who may use GPUs at all
    "research": {"users": []},  # may use the H100 pool, bigger quota
    "students": {"users": []},
}

# --- 3. KubeSpawner basics: every KubeSpawner setting keeps working under c.GPUSpawner -----------
# (or c.KubeSpawner; c.GPUSpawner wins where both are set, being the more specific class)
c.GPUSpawner.namespace = os.environ.get("POD_NAMESPACE", "jhub")
c.GPUSpawner.image = "quay.io/jupyter/scipy-notebook:2025-01-06"  # the default, for CPU servers
c.GPUSpawner.cpu_guarantee = 0.5
c.GPUSpawner.mem_guarantee = "1G"
# GPU images are large (often 5 to 15 GB) and a scale-up adds minutes: give starts time, so the
# hub does not give up on a pod that is pulling its image or waiting for a new node
c.GPUSpawner.start_timeout = 1200
c.GPUSpawner.http_timeout = 120
# home directories on a PVC per user (storage class: your cluster's default)
c.GPUSpawner.storage_pvc_ensure = True
c.GPUSpawner.storage_capacity = "20Gi"
c.GPUSpawner.pvc_name_template = "claim-{username}--{servername}"
c.GPUSpawner.volumes = [{"name": "home", "persistentVolumeClaim": {"claimName": "{pvc_name}"}}]
c.GPUSpawner.volume_mounts = [{"name": "home", "mountPath": "/home/jovyan"}]

# --- 4. A static profile: KubeSpawner's own schema, unchanged, listed before the GPU profiles ------
c.GPUSpawner.profile_list = [
    {
        "slug": "cpu",
        "display_name": "CPU only",
        "description": "2 CPUs and 8 GB of memory, no GPU.",
        "default": True,
        "kubespawner_override": {"cpu_limit": 2, "mem_limit": "8G"},
    },
]

# --- 5. GPU profiles: pools come from live capacity; gpuspawner adds the gpu_pool and gpus options --
_PYTORCH_CUDA12 = "quay.io/jupyter/pytorch-notebook:cuda12-2025-01-06"
c.GPUSpawner.gpu_profiles = [
    {
        # everyday GPU work: whole GPUs on any pool except MIG slices, with a choice of images,
        # each declaring the CUDA it carries so the page says per pool whether the drivers run it
        "slug": "gpu",
        "display_name": "GPU server",
        "description": "JupyterLab on one or more whole GPUs, in the pool you choose.",
        "kubespawner_override": {"image": _PYTORCH_CUDA12, "cpu_limit": 8, "mem_limit": "48G"},
        # what the image carries: quote versions ("12.10" is not 12.1), docs/cuda-compatibility.md
        "cuda": "12.4",  # the CUDA of the PyTorch wheels in this image: check yours
        "pools": {"exclude": ["*:nvidia.com/mig-*"]},  # MIG slices are offered by "gpu-small" only
        "max_gpus": 4,
        "profile_options": {
            "image": {
                "display_name": "Image",
                "choices": {
                    # no image of its own: the profile's image and its "cuda"
                    "pytorch": {"display_name": "PyTorch (CUDA 12.4)", "default": True},
                    "ngc": {
                        "display_name": "NVIDIA NGC PyTorch 24.05 (CUDA 12.4.1, forward compatible)",
                        "kubespawner_override": {"image": "nvcr.io/nvidia/pytorch:24.05-py3"},
                        # NGC images set NVIDIA_REQUIRE_CUDA and ship the cuda-compat package
                        "cuda": {
                            "cuda": "12.4",
                            "require": "cuda>=12.4 brand=tesla,driver>=470,driver<471",
                            "compat": True,
                        },
                    },
                    "cuda11": {
                        "display_name": "PyTorch 2.3 (CUDA 11.8), for older drivers",
                        "kubespawner_override": {"image": "pytorch/pytorch:2.3.1-cuda11.8-cudnn8-runtime"},
                        "cuda": "11.8",
                    },
                },
            },
        },
    },
    {
        # teaching: one MIG slice (or a shared GPU) each, for a group that does not need more
        "slug": "gpu-small",
        "display_name": "Small GPU (MIG slice)",
        "description": "A slice of an A100/H100: enough for courses and small models.",
        "kubespawner_override": {"image": _PYTORCH_CUDA12, "cpu_limit": 4, "mem_limit": "16G"},
        "cuda": "12.4",
        "pools": {"include": ["*:nvidia.com/mig-*", "*:nvidia.com/gpu.shared"]},
        "max_gpus": 1,
        "allowed_groups": ["students", "gpu-users"],
    },
]

# --- 6. Pool rules: rename, order, hide, and who may use which pool -------------------------------
# A pool id is <node group>:<product>:<resource>, lowercased (node group: the GKE node pool, EKS node
# group, AKS agent pool or Karpenter NodePool). Each pool takes the first rule that matches it;
# allowed_groups comes from the first matching rule that sets it (docs/access.md).
c.GPUSpawner.gpu_pool_rules = [
    {"match": "gpu-h100:*", "display_name": "H100 80 GB (fastest)", "allowed_groups": ["research"]},
    {"match": "gpu-a100:*:nvidia.com/gpu", "display_name": "A100 80 GB"},
    {"match": "gpu-l4:*", "display_name": "L4 24 GB"},
    {"match": "*:nvidia.com/mig-*", "allowed_groups": []},  # MIG slices: everyone the profile allows
    {"match": "gpu-legacy-*", "hide": True},  # old K80 nodes being drained: never offered
    {"match": "*", "allowed_groups": ["gpu-users", "research"]},  # every other pool
]

# --- 7. Taints a GPU server may tolerate on its pool's nodes --------------------------------------
# The defaults cover nvidia.com/gpu (GKE adds it to GPU node pools, EKS and self-managed clusters
# often do), amd.com/gpu, AKS's sku=gpu and AKS spot nodes. A server gets a toleration only for the
# taints its chosen pool actually carries. Add your own dedicated-node taints here:
c.GPUSpawner.gpu_tolerated_taint_keys = [
    "nvidia.com/gpu",
    "amd.com/gpu",
    "sku",
    "kubernetes.azure.com/scalesetpriority",
    "cloud.google.com/gke-spot",  # if you taint GKE Spot node pools with it, as the H100 pool below
]

# --- 8. A pool the cluster autoscaler creates from zero nodes -------------------------------------
# An empty node group has no node to discover; declaring it lets users choose it ("available after
# scale-up (~7 min)"). labels and taints must be those the new nodes will have, so that the pod's
# node affinity and tolerations match them and the autoscaler picks this node group.
c.GPUSpawner.gpu_declared_pools = [
    {
        "resource": "nvidia.com/gpu",
        "product": "NVIDIA-H100-80GB-HBM3",
        "memory_mib": 81559,
        "node_group_label": "cloud.google.com/gke-nodepool",  # eks.amazonaws.com/nodegroup on EKS...
        "node_group": "gpu-h100",
        "labels": {"cloud.google.com/gke-nodepool": "gpu-h100"},
        "taints": [
            {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
            {"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NoSchedule"},
        ],
        "gpus_per_node": 8,
        "max_nodes": 2,  # the node group's maximum size
        "minutes": 7,  # what users are told to expect
        "driver_version": "570.172.08",  # what new nodes get: lets the CUDA check judge before scale-up
        "cuda_version": "12.8",
    },
]

# --- 9. Capacity: what the hub does while it cannot see the cluster -------------------------------
# Without the ClusterRole of deploy/rbac.yaml, or while the watch is lost, GPU spawns are refused
# with 503 ("try again in a minute"). Admitting them instead lets the scheduler decide:
c.GPUSpawner.gpu_admit_without_capacity = False
c.GPUSpawner.gpu_capacity_sync_timeout = 5
c.GPUSpawner.gpu_reservation_ttl = 600  # scale-ups are slow: keep reservations until the pod shows

# --- 10. GPU quotas: GPUs one user may hold at once, over all their servers -----------------------
c.GPUSpawner.gpu_quota = 1
c.GPUSpawner.gpu_quota_by_group = {"research": 8, "gpu-users": 2, "students": 1}  # the most generous wins
c.GPUSpawner.gpu_quota_admin = None  # admins: no limit

# --- 11. CUDA: how strictly an image's CUDA must fit a node's driver, and the on-node probe --------
c.GPUSpawner.cuda_policy = "minor"  # strict | minor | forward (docs/cuda-compatibility.md)
# Opt-in: an init container runs `gpuspawner probe` with the server's GPUs before the server starts,
# so a broken node (no driver visible, missing GPUs, a driver that does not fit) fails the spawn at
# once with the reason. Its image needs gpuspawner and nvidia-ml-py; by default it is the server's.
c.GPUSpawner.cuda_probe = True
c.GPUSpawner.cuda_probe_image = "ghcr.io/example/gpuspawner-probe:0.1.0"  # your build: see docs/zero-to-jupyterhub.md

# --- 12. Metrics -------------------------------------------------------------------------------------
# gpuspawner's gpuspawner_* series (free GPUs per pool, spawn outcomes, waits) are served on
# /hub/metrics with JupyterHub's own; nothing else listens. A Prometheus scraper needs a token with
# the read:metrics scope (docs/metrics.md):
# (append: the Zero to JupyterHub chart has already put hub.services and the idle culler there)
if os.environ.get("PROMETHEUS_API_TOKEN"):
    c.JupyterHub.services.append({"name": "prometheus", "api_token": os.environ["PROMETHEUS_API_TOKEN"]})
    c.JupyterHub.load_roles.append({"name": "metrics", "scopes": ["read:metrics"], "services": ["prometheus"]})
