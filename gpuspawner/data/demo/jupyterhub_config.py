"""The demo's ``jupyterhub_config.py``, run by ``gpuspawner demo`` (which sets the GPUSPAWNER_DEMO_*
variables, starts the simulated cluster and points KUBECONFIG at it): the snippet an admin drops
into a real hub, then what a site adds (an authenticator, profiles, a pool the autoscaler can create).
"""

import os

import gpuspawner

c = get_config()  # noqa: F821 - provided by traitlets when JupyterHub loads this file
env = os.environ

load_subconfig(env.get("GPUSPAWNER_DEMO_SNIPPET") or str(gpuspawner.config_snippet()))  # noqa: F821 - traitlets'

workdir = env.get("GPUSPAWNER_DEMO_DIR") or os.getcwd()

# --- the hub, on loopback -------------------------------------------------------------------
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = int(env.get("GPUSPAWNER_DEMO_PORT") or 8000)
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = int(env.get("GPUSPAWNER_DEMO_HUB_PORT") or 8081)
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{env.get('GPUSPAWNER_DEMO_PROXY_API_PORT') or 8001}"
c.ConfigurableHTTPProxy.command = [env.get("GPUSPAWNER_DEMO_PROXY") or "configurable-http-proxy"]
c.JupyterHub.db_url = f"sqlite:///{os.path.join(workdir, 'jupyterhub.sqlite')}"
c.JupyterHub.cookie_secret_file = os.path.join(workdir, "jupyterhub_cookie_secret")
c.JupyterHub.allow_named_servers = True

# --- anyone may log in with any password (a demo!) -----------------------------------------
c.JupyterHub.authenticator_class = "dummy"
c.Authenticator.allow_all = True
c.Authenticator.admin_users = {"admin"}

token = env.get("GPUSPAWNER_DEMO_ADMIN_TOKEN")
if token:
    c.JupyterHub.services = [{"name": "gpuspawner-demo-admin", "api_token": token}]
    # appended: the snippet's load_roles grants users custom:gpus:read (docs/access.md); the admin
    # role has no custom scope, so the demo's admin token is granted it too
    c.JupyterHub.load_roles.append({"name": "admin", "services": ["gpuspawner-demo-admin"]})
    c.JupyterHub.load_roles.append(
        {"name": "gpu-capacity-reader", "scopes": ["custom:gpus:read"], "services": ["gpuspawner-demo-admin"]})

# --- the pods ------------------------------------------------------------------------------
culler = env.get("GPUSPAWNER_DEMO_CULLER")
if culler:  # gpuspawner demo's GPU culler (gpuspawner/commands/demo_cull.py; --no-cull: none)
    import json

    spec = json.loads(culler)
    c.JupyterHub.services.append(
        {"name": "gpu-culler", "command": spec["command"], "environment": spec["environment"]})
    c.JupyterHub.load_roles.append({"name": "gpu-culler", "scopes": spec["scopes"], "services": ["gpu-culler"]})
    # the culler's rule on the spawn page and the home page, and each server's GPU use from its Prometheus
    c.GPUSpawner.gpu_cull_rules = spec["rules"]
    c.GPUSpawner.gpu_prometheus_url = spec["prometheus_url"]

c.GPUSpawner.namespace = "jupyterhub"
c.GPUSpawner.image = "quay.io/jupyter/base-notebook:2025-01-06"
c.GPUSpawner.cmd = ["jupyterhub-singleuser"]
# servers open JupyterLab (the demo extra installs it beside jupyter_server)
c.GPUSpawner.default_url = "/lab"
# the test cluster runs a server as its image's user (jovyan) when the demo runs as root, else as
# the demo's own user; where jovyan could not reach this Python it stays root (a container, CI):
# the flag lets jupyterhub-singleuser start then too (a real image runs as jovyan and needs no flag)
c.GPUSpawner.args = ["--allow-root"]
c.GPUSpawner.start_timeout = 180
c.GPUSpawner.http_timeout = 90
c.GPUSpawner.delete_grace_period = 2

# an ordinary KubeSpawner profile: keeps working unchanged beside the GPU one
c.GPUSpawner.profile_list = [
    {
        "slug": "cpu",
        "display_name": "CPU only",
        "description": "2 CPUs and 4 GiB of memory, no GPU.",
        "default": True,
        "kubespawner_override": {"cpu_limit": 2, "mem_limit": "4G"},
    },
]

# the GPU profile: its pools are discovered from the cluster, not listed here. Each image
# declares the CUDA it is built with (docs/configuration.md section 10), so the spawn page
# shows per pool whether the nodes' NVIDIA drivers run it. On the default cluster:
#   CUDA 12.4 fits the MIG node (570, CUDA 12.8), fits the A100 pool's 570 node and its 535
#   node (CUDA 12.2) through minor-version compatibility (a caveat), and does not fit the T4
#   pool (470, CUDA 11.4: CUDA 12 needs driver 525.60.13 or newer even with minor-version
#   compatibility, gpuspawner/data/cuda-driver-table.csv): a spawn there is refused
#   before any pod exists, with the reason;
#   CUDA 11.8 runs on all of them (on the T4 pool with the minor-version caveat).
#   Neither runs on the AMD MI300X pool (CUDA images need NVIDIA GPUs).
c.GPUSpawner.gpu_profiles = [
    {
        "slug": "gpu",
        "display_name": "GPU server",
        "description": "PyTorch on the GPU pool you choose.",
        "kubespawner_override": {
            "image": "quay.io/jupyter/pytorch-notebook:cuda12-2025-01-06",
            # what the server asks of its node besides GPUs: the spawn page offers a pool's GPUs only
            # on nodes where this fits (the AKS T4 nodes have 3.86 CPUs and 24Gi)
            "cpu_limit": 2,
            "mem_limit": "16G",
        },
        "cuda": "12.4",
        "max_gpus": 8,
        "profile_options": {
            "image": {
                "display_name": "Image",
                "choices": {
                    "cuda12": {"display_name": "PyTorch (CUDA 12.4)", "default": True},
                    "cuda11": {
                        "display_name": "PyTorch (CUDA 11.8)",
                        "kubespawner_override": {"image": "pytorch/pytorch:2.3.1-cuda11.8-cudnn8-runtime"},
                        "cuda": "11.8",
                    },
                },
            },
        },
    },
]

# a pool the cluster autoscaler creates from zero nodes when someone asks for it
c.GPUSpawner.gpu_declared_pools = [
    {
        "resource": "nvidia.com/gpu",
        "product": "NVIDIA-H100-80GB-HBM3",
        "memory_mib": 81559,
        "node_group_label": "cloud.google.com/gke-nodepool",
        "node_group": "gpu-h100-spot",
        "labels": {
            "cloud.google.com/gke-nodepool": "gpu-h100-spot",
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        },
        "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        "gpus_per_node": 8,
        "max_nodes": 2,
        "minutes": 7,
        "driver_version": "570.172.08",
        "cuda_version": "12.8",
    },
]

# gpuspawner demo --kueue: the A100 pool's servers queue through Kueue (testcluster/demo-kueue.yaml)
if env.get("GPUSPAWNER_DEMO_KUEUE_QUEUES"):
    import json

    c.GPUSpawner.gpu_kueue_queues = json.loads(env["GPUSPAWNER_DEMO_KUEUE_QUEUES"])

# tests and local experiments may add settings on top (gpuspawner demo --config FILE)
if env.get("GPUSPAWNER_DEMO_EXTRA_CONFIG"):
    load_subconfig(env["GPUSPAWNER_DEMO_EXTRA_CONFIG"])  # noqa: F821 - provided by traitlets
