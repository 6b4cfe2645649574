"""gpuspawner: enable the GPU spawner and the GPU capacity endpoint.
Drop this file into a directory your ``jupyterhub_config.py`` loads, or ``load_subconfig`` it;
what it sets and why: docs/zero-to-jupyterhub.md.
"""

import gc as _gc

from gpuspawner.hub.config_check import check_at_hub_start as _gpuspawner_check_config
from gpuspawner.hub.guard import install_for_hub as _gpuspawner_guard
from gpuspawner.hub.handlers import grant_scope as _gpuspawner_grant_scope
from gpuspawner.hub.handlers import handlers as _gpuspawner_handlers
from gpuspawner.hub.form_assets import handlers as _gpuspawner_form_assets
from gpuspawner.hub.templates import hub_template_dir as _gpuspawner_hub_templates
from gpuspawner.hub.log_filter import install_for_hub as _gpuspawner_log_filter
from gpuspawner.hub.mygpus import HOME_VAR as _gpuspawner_servers_var
from gpuspawner.hub.mygpus import home_gpu_servers as _gpuspawner_home_gpu_servers
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
c.JupyterHub.extra_handlers.extend(_gpuspawner_form_assets())  # the spawn form's script and style
# before JupyterHub's own templates, which ours extend ("templates/home.html"); a list the admin set
# before this file keeps its templates first
if isinstance(c.JupyterHub.template_paths, list):
    c.JupyterHub.template_paths.append(_gpuspawner_hub_templates())
else:
    c.JupyterHub.template_paths.prepend([_gpuspawner_hub_templates()])
c.JupyterHub.extra_handlers.extend(_gpuspawner_usage_handlers)
c.JupyterHub.custom_scopes.update(_gpuspawner_usage_scopes)
c.JupyterHub.template_vars.update({_gpuspawner_home_var: _gpuspawner_home_gpu_hours,
                                   _gpuspawner_servers_var: _gpuspawner_home_gpu_servers})
_gpuspawner_grant_scope(c)
_gpuspawner_log_filter()
_gpuspawner_check_config()
_gpuspawner_guard()
_gpuspawner_prepull()  # with c.GPUSpawner.gpu_prepull: warm GPU images per pool (docs/prepull.md)

# after the imports above (this file's own pulls in JupyterHub, KubeSpawner and kubernetes_asyncio):
# collect once, so that no garbage is kept, then freeze what is left (Python docs, gc.freeze)
_gc.collect()
_gc.freeze()
