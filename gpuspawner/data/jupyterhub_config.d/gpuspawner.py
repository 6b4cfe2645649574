"""gpuspawner: enable the GPU spawner and the GPU capacity endpoint.

Drop this file into a directory your ``jupyterhub_config.py`` loads (Zero to
JupyterHub: ``hub.extraFiles`` into ``/usr/local/etc/jupyterhub/jupyterhub_config.d/``),
or ``load_subconfig`` it. It sets only what every gpuspawner hub needs:

* ``c.JupyterHub.spawner_class = "gpu"`` (the ``jupyterhub.spawners`` entry
  point of ``gpuspawner.GPUSpawner``, a KubeSpawner subclass: all KubeSpawner
  settings, including ``profile_list``, keep working);
* ``GET /hub/api/gpus`` (``gpuspawner.hub.handlers.GPUCapacityHandler``) and the custom scope it
  needs, ``custom:gpus:read``, granted to JupyterHub's ``user`` role unless your config defines
  that role itself (docs/access.md);
* a home page that says why Kueue stopped a user's server, when it did (docs/kueue.md), and the
  user's GPU-hours (docs/usage.md); its directory goes first in ``c.JupyterHub.template_paths``
  (a list you set replaces it), with its variable in ``c.JupyterHub.template_vars``;
* ``GET /hub/api/users/{name}/gpu-usage`` and ``GET /hub/api/gpu-usage`` (GPU-hours from the ledger,
  ``gpuspawner.hub.gpu_hours_handlers``) and the custom scope ``custom:gpu-usage:read`` that guards them;
* a full garbage collection and ``gc.freeze()`` once the imports are done: the
  ~280,000 objects of JupyterHub, KubeSpawner, kubernetes_asyncio and gpuspawner
  are moved out of reach of Python's cyclic garbage collector, whose full passes
  would otherwise walk them all (~180 ms, a stall of the hub's event loop for
  every user) again and again while the GPU capacity cache reads a big cluster.
  They are never garbage; nothing else changes. The capacity cache freezes what
  the hub holds once more after its first sync (``c.GPUSpawner.gpu_capacity_gc_freeze``);
  docs/capacity.md, "Garbage collection", has the figures;
* a log filter that keeps a refused spawn to one INFO line, without JupyterHub's own
  ERROR lines and tracebacks about it (``gpuspawner.hub.log_filter``);
* a check of every GPUSpawner setting once the hub has read all of its configuration
  (``gpuspawner.hub.config_check``): a wrong one stops the hub before it serves anything,
  with one line per problem on stderr (the setting, the value, what to write instead).
* a size limit (64 KiB) on the bodies of the spawn and server endpoints, applied before the
  body is read, and the option rules applied before JupyterHub saves a request's options
  (``gpuspawner.hub.guard``);
* with ``c.GPUSpawner.gpu_prepull``, once the hub has started, the task that keeps one
  pre-pull DaemonSet per GPU pool (``gpuspawner.hub.prepull``, docs/prepull.md).

Site settings go in your own config, e.g.::

    c.GPUSpawner.gpu_profiles = [{"slug": "gpu", "display_name": "GPU server"}]

and see docs/configuration.md. The hub's service account also needs
cluster-wide read access to nodes and pods: apply ``deploy/rbac.yaml``.
Without it the hub still serves static profiles and says GPU capacity is
unknown. (JupyterHub logs that ``extra_handlers`` is deprecated in favour of
services; the endpoint reads the hub's in-process capacity cache, which a
separate service process could not share.)
"""

import gc as _gc

from gpuspawner.hub.config_check import check_at_hub_start as _gpuspawner_check_config
from gpuspawner.hub.guard import install_for_hub as _gpuspawner_guard
from gpuspawner.hub.handlers import grant_scope as _gpuspawner_grant_scope
from gpuspawner.hub.handlers import handlers as _gpuspawner_handlers
from gpuspawner.hub.templates import hub_template_dir as _gpuspawner_hub_templates
from gpuspawner.hub.log_filter import install_for_hub as _gpuspawner_log_filter
from gpuspawner.hub.prepull import start_with_hub as _gpuspawner_prepull
from gpuspawner.hub.gpu_hours_handlers import CUSTOM_SCOPES as _gpuspawner_usage_scopes
from gpuspawner.hub.gpu_hours_handlers import handlers as _gpuspawner_usage_handlers
from gpuspawner.hub.gpu_hours_page import HOME_VAR as _gpuspawner_home_var
from gpuspawner.hub.gpu_hours_page import home_gpu_hours as _gpuspawner_home_gpu_hours

# `c` is the config object both traitlets (`jupyterhub -f`, `load_subconfig`) and the Zero to
# JupyterHub chart (files in /usr/local/etc/jupyterhub/jupyterhub_config.d/) put in this file's
# namespace; the chart's own `get_config` takes a key, so calling `get_config()` here would fail there.
c = globals()["c"]

c.JupyterHub.spawner_class = "gpu"
c.JupyterHub.extra_handlers.extend(_gpuspawner_handlers)
# before JupyterHub's own templates, which ours extend ("templates/home.html"); a list the admin set
# before this file keeps its templates first
if isinstance(c.JupyterHub.template_paths, list):
    c.JupyterHub.template_paths.append(_gpuspawner_hub_templates())
else:
    c.JupyterHub.template_paths.prepend([_gpuspawner_hub_templates()])
c.JupyterHub.extra_handlers.extend(_gpuspawner_usage_handlers)
c.JupyterHub.custom_scopes.update(_gpuspawner_usage_scopes)
c.JupyterHub.template_vars.update({_gpuspawner_home_var: _gpuspawner_home_gpu_hours})
_gpuspawner_grant_scope(c)
_gpuspawner_log_filter()
_gpuspawner_check_config()
_gpuspawner_guard()
_gpuspawner_prepull()  # with c.GPUSpawner.gpu_prepull: warm GPU images per pool (docs/prepull.md)

# after the imports above (this file's own pulls in JupyterHub, KubeSpawner and kubernetes_asyncio):
# collect once, so that no garbage is kept, then freeze what is left (Python docs, gc.freeze)
_gc.collect()
_gc.freeze()
