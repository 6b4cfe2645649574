"""A refused request: logged once, counted, its choices kept for the form; and the checks before options are saved."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tornado.log import app_log, gen_log

from gpuspawner.hub import gpu_hours, gpu_metrics, log_filter, spawn_page
from gpuspawner.hub.errors import Refusal, refusal
from gpuspawner.hub.form_choices import form_choices
from gpuspawner.spawn.access import AccessError, check_access
from gpuspawner.spawn.options import STATIC_REASONS, OptionError, names, validate_user_options
from gpuspawner.spawn.option_sources import dropped_query_names, options_from_form, options_from_query
from gpuspawner.spawn.plan import PlanRefusal, refusal_pool

__all__ = ["refuse", "count", "refuse_plan", "check_budget", "check_options", "read_query", "read_form", "metrics_of"]


def metrics_of(spawner: Any) -> gpu_metrics.GPUMetrics:
    """The collector spawn outcomes are counted in (``gpu_metrics.install``: idempotent)."""
    return gpu_metrics.install(spawner.metrics_registry)


def refuse(spawner: Any, status: int, message: str, *, reason: str, in_start: bool = True,
           what: str = "spawn") -> Refusal:
    """The error a refused request is raised with; logged here once, at INFO, without a traceback
    (JupyterHub's own ERROR lines about it are dropped: ``hub.log_filter``). The refused options are
    not kept as the next spawn's defaults: JupyterHub stores a request's options in its database
    before ``start`` (jupyterhub/user.py ``spawn``)."""
    spawner.log.info("Refused %s of %s (%s): %s", what, spawner._log_name, reason, message)
    if in_start:  # not for a query refused before JupyterHub stored anything
        spawner.gpu_held = 0
        # nothing to stop; the spawn page comes back with what the user chose (not stored as the next spawn's)
        spawner._spawn = replace(spawner._spawn, refused=True, form_choices=form_choices(spawner.user_options))
        _forget_options(spawner)
    error = refusal(status, message, reason=reason)
    # the handlers' log, jupyterhub/user.py's (tornado's app_log) and tornado's own (gen_log)
    for logger in (getattr(spawner.log, "logger", spawner.log), app_log, gen_log):
        log_filter.install(logger)
    log_filter.expect(getattr(spawner.user, "name", ""), spawner.name, spawner._log_name, error)
    return error


def _forget_options(spawner: Any) -> None:
    # in memory too: the spawn page re-rendered after a refused form post would otherwise
    # judge (and log) the same refused options once more
    spawner.user_options = {}
    orm = getattr(spawner, "orm_spawner", None)
    if orm is None or not getattr(orm, "user_options", None):
        return
    try:
        orm.user_options = {}
        db = getattr(spawner.user, "db", None)
        if db is not None:
            db.commit()
    except Exception as e:  # the refusal stands either way
        spawner.log.warning("Could not forget the refused options of %s: %s", spawner._log_name, e)


def count(spawner: Any, reason: str, profile_list: Any, offers: Any, options: Any = None) -> None:
    """Count a refused request for GPUs (``gpuspawner_spawns_total{outcome="refused"}``); refusals
    of other requests are KubeSpawner's business and not counted (``plan.refusal_pool``)."""
    gpu_request, pool = refusal_pool(spawner.user_options if options is None else options, profile_list, offers)
    if gpu_request:
        metrics_of(spawner).spawn_refused(pool, reason)


def refuse_plan(spawner: Any, refused: PlanRefusal, profile_list: Any, offers: Any) -> Refusal:
    """Count a refused plan and give the error to raise."""
    if refused.pool is not None:
        metrics_of(spawner).spawn_refused(refused.pool, refused.counted)
    else:
        count(spawner, refused.counted, profile_list, offers)
    return refuse(spawner, refused.status, refused.message, reason=refused.reason)


def check_budget(spawner: Any, selection: Any) -> None:
    """Refuse (403) a launch that the user's GPU-hour budget cannot cover for
    ``gpu_hour_minimum_minutes`` (``hub.gpu_hours``)."""
    pool = selection.pool.pool
    verdict = gpu_hours.check_launch(spawner, pool, selection.gpus)
    if verdict is not None and not verdict.allowed:
        metrics_of(spawner).spawn_refused(pool.id, "budget")
        metrics_of(spawner).budget_refused(pool.id)
        raise refuse(spawner, 403, verdict.message(), reason=gpu_hours.REFUSAL_REASON)


async def check_options(spawner: Any, options: Any, *, spawn: bool) -> None:
    """Refuse, before JupyterHub saves them, options that no capacity could make right: names no
    profile takes, steering keys, counts that are no count, a profile or pool the user may not use.
    What depends on the capacity of the moment (room in a pool, a pool that exists, CUDA) is
    checked when the server starts. ``spawn``: the options start a server now (a refusal is
    counted as a refused spawn). The page's offers (at most ``gpu_capacity_page_max_age`` old) will do."""
    profile_list, view = await spawn_page.offer_view(spawner, spawner.gpu_capacity_page_max_age)
    try:
        check_access(options, view)
        validate_user_options(options, profile_list, view.offers, trait_names=spawner.trait_names(),
                              admin_keys=spawn_page.admin_option_keys(spawner))
    except AccessError as e:
        status, message, reason = e.status, str(e), "not_allowed"
    except OptionError as e:
        if e.reason not in STATIC_REASONS:
            return
        status, message, reason = e.status, str(e), e.reason
    else:
        return
    if spawn:
        count(spawner, reason, profile_list, view.offers, options)
    raise refuse(spawner, status, message, reason=reason, in_start=False, what="spawn" if spawn else "options")


async def read_query(spawner: Any, query_data: Any) -> dict:
    """A query-string spawn's options (``option_sources.options_from_query``); a name JupyterHub dropped
    before handing the query over, or one no profile takes, is refused with a 400 that names it."""
    handler = getattr(spawner, "handler", None)
    raw = getattr(getattr(handler, "request", None), "query_arguments", None) or {}
    try:
        dropped = dropped_query_names(raw)
        if dropped:
            raise OptionError(
                f"the query mixes `opt-` names with plain ones ({names(dropped)}), "
                "and JupyterHub reads only the `opt-` ones: write every option the same way, "
                "e.g. ?profile=gpu&gpus=2"
            )
        options = options_from_query(query_data)
    except OptionError as e:
        raise refuse(spawner, 400, str(e), reason=e.reason, in_start=False) from None
    await check_options(spawner, options, spawn=True)
    return options


async def read_form(spawner: Any, formdata: Any) -> dict:
    """A spawn form post's options, read by the query's rules (``option_sources.options_from_form``):
    a name no profile takes, given twice or of another profile the page does not show is refused
    with a 400 that names it, before JupyterHub saves anything."""
    profile_list, _ = await spawn_page.offer_view(spawner, spawner.gpu_capacity_page_max_age)
    fields = {p.get("slug"): tuple(p.get("profile_options") or ()) for p in profile_list}
    default = next((p.get("slug") for p in profile_list if p.get("default")), None)
    try:
        options = options_from_form(formdata, fields, default or next(iter(fields), None))
    except OptionError as e:
        raise refuse(spawner, 400, str(e), reason=e.reason, in_start=False) from None
    await check_options(spawner, options, spawn=True)
    return options
