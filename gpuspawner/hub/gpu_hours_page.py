"""The GPU-hours users see: on the spawn page (what is left, what the chosen pool and count cost per
hour) and on the home page (the running servers' cost so far, a warning before a budget stops them)."""

from __future__ import annotations

import functools
import logging
from datetime import datetime
from typing import Any

from gpuspawner.hub import gpu_hours, mygpus
from gpuspawner.hub.templates import form_environment
from gpuspawner.spawn.access import principal_of
from gpuspawner.usage.accounting import fmt_hours, fmt_time

log = logging.getLogger(__name__)

BANNER = "gpu-hours.html"
HOME_VAR = "gpuspawner_gpu_hours"


def standing_words(st: Any) -> str:
    """"You have 3.5 of your 20 GPU-hours left in the last 30 days." (or, with no budget, what was used)."""
    v = st.verdict
    if v.budget is None:
        return f"You have used {fmt_hours(v.used)} GPU-hours {v.window.describe()}; no GPU-hour budget applies to you."
    words = f"You have {fmt_hours(v.remaining)} of your {fmt_hours(v.budget)} GPU-hours left {v.window.describe()}"
    if not v.allowed and v.retry_at is not None:
        words += f"; {fmt_hours(v.back)} GPU-hours come back on {fmt_time(v.retry_at)}"
    return words + "."


def _standing(settings: Any, db: Any, user: Any) -> Any:
    store = gpu_hours.ledger(db)
    if store is None:
        return None
    who = principal_of(user)
    return gpu_hours.standing(settings, store, who.name, who.groups, gpu_hours.minimum_need(settings, 1.0),
                              for_page=True)


def spawn_banner(spawner: Any, offers: dict[str, Any]) -> str:
    """The lines above the spawn form: the user's GPU-hours and each offered pool's hourly rate (per
    view: the form itself is shared by users alike, this part is the user's own). Empty without a
    ledger (no database); never an error on the page."""
    try:
        st = _standing(spawner, gpu_hours.hub_db(spawner), spawner.user)
        if st is None:  # no ledger (no database): nothing of the user's to show
            return ""
        rates: dict[str, float] = {}
        for offer in offers.values():
            for p in getattr(offer, "pools", ()):
                pool = p.pool
                _s, _w, rate = gpu_hours.launch_rate(spawner, pool.id, pool.product, pool.resource, 1,
                                                 gpu_hours.known_replicas.get(pool.id))
                rates[pool.id] = round(rate, 4)
        return _banner(tuple(spawner.additional_profile_form_template_paths), standing_words(st),
                       tuple(rates.items()))
    except Exception as e:  # the page shows the form without its GPU-hours
        log.warning("The spawn page's GPU-hours could not be shown: %s: %s", type(e).__name__, e)
        return ""


@functools.lru_cache(maxsize=256)
def _banner(template_paths: tuple[str, ...], words: str, rates: tuple[tuple[str, float], ...]) -> str:
    # users alike see the same lines (the words say their hours, the rates are the pools')
    env = form_environment(template_paths)
    return env.get_template(BANNER).render(standing=words, rates=dict(rates))


class HomeGpuHours:
    """The template variable's value for one page: ``read()`` gives the home page's GPU-hours section.
    JupyterHub makes the value for every page it renders; only the home page reads it, so the
    ledger is queried for that page alone."""

    def __init__(self, settings_of: Any, user: Any) -> None:
        self.settings_of = settings_of
        self.user = user

    def read(self) -> dict[str, Any] | None:
        """The section's words, None when there is nothing to show. Never raises."""
        try:
            settings = self.settings_of()
            st = _standing(settings, self.user.db, self.user)
            if st is None:
                return None
            names = mygpus.pool_names(settings) if any(h.stop is None for h in st.holdings) else {}
            return home_context(settings, st, names)
        except Exception as e:
            log.warning("The home page's GPU-hours could not be shown: %s: %s", type(e).__name__, e)
            return None


def home_vars(settings_of: Any) -> Any:
    """The template variable's callable: ``user -> HomeGpuHours | None`` (JupyterHub calls it on each
    page with the signed-in user; the work is in ``read``, which only the home page calls).
    ``settings_of()`` gives the hub's ``GPUSpawnerSettings``."""

    def gpu_hours(user: Any) -> HomeGpuHours | None:
        if user is None or getattr(user, "db", None) is None:
            return None
        return HomeGpuHours(settings_of, user)

    return gpu_hours


def home_context(settings: Any, st: Any, names: Any = None) -> dict[str, Any]:
    """The GPU-hours section's words; ``names``: pool id -> (model, name), for the pools' names
    (``mygpus.pool_names``; a pool it does not know reads as its node group, never its raw id)."""
    servers = [
        {"name": h.server, "gpus": h.gpus, "pool": mygpus.pool_label(h.pool, names or {}), "rate": fmt_hours(h.rate),
         "cost": fmt_hours(h.hours(None, st.now))}
        for h in st.holdings if h.stop is None
    ]
    warning = None
    out: datetime | None = st.runs_out_at() if settings.gpu_hour_stop_when_spent else None
    if out is not None and (out - st.now).total_seconds() <= settings.gpu_hour_warn_minutes * 60:
        warning = (f"Your GPU-hour budget runs out on {fmt_time(out)}; your running GPU servers will then be "
                   "stopped. Save your work.")
    return {"standing": standing_words(st), "servers": servers, "warning": warning}



_settings_memo: dict[int, Any] = {}


def hub_settings() -> Any:
    """The running hub's ``GPUSpawnerSettings``, from its whole config (a config file's ``c`` may be one
    that ``load_subconfig`` merges later, without what comes after it): built once per hub."""
    from jupyterhub.app import JupyterHub

    from gpuspawner.hub.settings import GPUSpawnerSettings
    from gpuspawner.hub.spawner import capacity_settings_class

    app = JupyterHub.instance()
    settings = _settings_memo.get(id(app))
    if settings is None:
        _settings_memo.clear()
        settings = GPUSpawnerSettings.from_hub_config(app.config, capacity_settings_class(app.spawner_class))
        _settings_memo[id(app)] = settings
    return settings


#: the template variable's callable the config snippet registers
home_gpu_hours = home_vars(hub_settings)
