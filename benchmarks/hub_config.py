# jupyterhub_config.py of the hubs benchmarks/hub.py starts, one per mode (HUBBENCH_MODE):
#
#   gpu:    GPUSpawner through the product's own config snippet (jupyterhub_config.d/gpuspawner.py,
#           as an admin loads it), with a config like the demo's: a CPU profile, a GPU profile
#           whose two image choices declare CUDA, allowed groups, per-group GPU quotas;
#   static: plain KubeSpawner with a static profile_list of the same size (the same profiles,
#           image choices, one choice per GPU pool, counts 1-8).
#
# The profiles are in benchmarks/hubprofiles.py.
#
# Both get the benchmark's loop-lag probe (benchmarks/hubprobe.py, GET /hub/bench/probe), a
# dummy authenticator, an admin service token, and a real configurable-http-proxy. The cluster
# (Kubernetes' own control plane, benchmarks/realcluster.py) is reached through KUBECONFIG.
import os
import sys

c = get_config()  # noqa: F821 - provided by traitlets when JupyterHub loads this file
env = os.environ
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)

import bigcluster  # noqa: E402  (benchmarks/bigcluster.py)
import hubprobe  # noqa: E402  (benchmarks/hubprobe.py)
import hubprofiles  # noqa: E402  (benchmarks/hubprofiles.py)

mode = env["HUBBENCH_MODE"]
workdir = env["HUBBENCH_DIR"]
hubprobe.install(c, stall_stacks=env.get("HUBBENCH_STALL_STACKS") == "1")

if mode == "gpu":
    load_subconfig(env["HUBBENCH_SNIPPET"])  # noqa: F821 - provided by traitlets
    # gpuspawner's own share of each view, timed inside the hub (not the framework's, nor the proxy's)
    from gpuspawner.hub import spawn_page
    from gpuspawner.hub.handlers import GPUCapacityHandler
    from gpuspawner.hub.spawner import GPUSpawner

    hubprobe.time_method(spawn_page, "render_page", "spawn_form")  # GPUSpawner's options_form
    hubprobe.time_method(GPUCapacityHandler, "get", "api_gpus")
    hubprobe.time_method(GPUSpawner, "load_user_options", "load_user_options")
else:
    c.JupyterHub.spawner_class = "kubespawner.KubeSpawner"
# both hubs: KubeSpawner's own start (for GPUSpawner: inside its _start, after nothing of its own)
from kubespawner import KubeSpawner  # noqa: E402

hubprobe.time_method(KubeSpawner, "_start", "kubespawner_start")

# --- the hub, on loopback -------------------------------------------------------------------
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = int(env["HUBBENCH_PORT"])
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = int(env["HUBBENCH_HUB_PORT"])
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{env['HUBBENCH_PROXY_API_PORT']}"
c.ConfigurableHTTPProxy.command = [env["HUBBENCH_PROXY"]]
c.JupyterHub.db_url = f"sqlite:///{os.path.join(workdir, 'jupyterhub.sqlite')}"
c.JupyterHub.cookie_secret_file = os.path.join(workdir, "jupyterhub_cookie_secret")
c.JupyterHub.allow_named_servers = True
c.JupyterHub.named_server_limit_per_user = 0
c.JupyterHub.log_level = env.get("HUBBENCH_LOG_LEVEL", "INFO")

c.JupyterHub.authenticator_class = "dummy"
c.Authenticator.allow_all = True
c.Authenticator.admin_users = {"admin"}
c.JupyterHub.load_groups = {"ml": {"users": ["bench"]}}
c.JupyterHub.services = [{"name": "bench-admin", "api_token": env["HUBBENCH_TOKEN"]}]
# appended to the snippet's roles (users' custom:gpus:read); the admin role has no custom scope, so the
# GPU hub grants it to the benchmark's token (the static hub defines no such scope)
c.JupyterHub.load_roles.append({"name": "admin", "services": ["bench-admin"]})
if mode == "gpu":
    c.JupyterHub.load_roles.append(
        {"name": "gpu-capacity-reader", "scopes": ["custom:gpus:read"], "services": ["bench-admin"]})

# --- the pods: the same for both spawners ---------------------------------------------------
c.KubeSpawner.namespace = "jupyterhub"
c.KubeSpawner.image = "quay.io/jupyter/base-notebook:2025-01-06"
c.KubeSpawner.cmd = ["jupyterhub-singleuser"]
c.KubeSpawner.args = ["--allow-root"]
c.KubeSpawner.start_timeout = 180
c.KubeSpawner.http_timeout = 90
c.KubeSpawner.delete_grace_period = 1
# the few A100 nodes whose node agent runs pods as processes (jupyterhub-singleuser then answers at
# the pod's IP); the bulk agent's nodes only report their pods Running. The same for both hubs.
c.KubeSpawner.node_selector = {bigcluster.SPAWN_LABEL: "true"}

if mode == "gpu":
    for name, value in hubprofiles.gpu_settings().items():
        setattr(c.GPUSpawner, name, value)
else:
    c.KubeSpawner.profile_list = hubprofiles.static_profile_list()
    # the GPU hub's garbage-collection policy (its config snippet: a full collection, then
    # gc.freeze(), once the imports are done), so that the two hubs' stalls compare like with like
    import gc  # noqa: E402

    gc.collect()
    gc.freeze()
