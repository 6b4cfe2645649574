"""``GET /hub/api/users/{name}/gpu-usage`` and ``GET /hub/api/gpu-usage``: GPU-hours from the ledger."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timedelta
from typing import Any

from jupyterhub import orm
from jupyterhub.scopes import has_scope
from tornado import web

from gpuspawner.hub import gpu_hours
from gpuspawner.hub.handlers import GPUCapacityHandler
from gpuspawner.spawn.access import principal_of
from gpuspawner.usage import clock
from gpuspawner.usage.pods import parse_time

SCOPE = "custom:gpu-usage:read"
CUSTOM_SCOPES = {
    SCOPE: {
        "description": "Read the GPU-hours users used and their GPU-hour budgets (filter by !user= or !group=).",
    },
}
#: JupyterHub's own scope that also lets its holders (hub admins) read GPU usage
ADMIN_SCOPE = "admin:users"

USER_PATH = r"/api/users/([^/]+)/gpu-usage"
REPORT_PATH = r"/api/gpu-usage"
REPORT_DAYS = 30  # a report without ?since= covers this many days


def _iso(t: datetime | None) -> str | None:
    return t.isoformat().replace("+00:00", "Z") if t is not None else None


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


class _UsageHandler(GPUCapacityHandler):
    """The settings (``GPUCapacityHandler.capacity_settings``) and the checks both endpoints share."""

    def allowed(self, filter_: str | None = None) -> bool:
        for scope in (SCOPE, ADMIN_SCOPE):
            if has_scope(f"{scope}!{filter_}" if filter_ else scope, self.parsed_scopes, db=self.db):
                return True
        return False

    def signed_in(self) -> Any:
        if self.current_user is None:
            raise web.HTTPError(403, "sign in, or send an API token (header 'Authorization: token <token>'), "
                                     "to read GPU usage")
        return self.current_user

    def ledger(self) -> Any:
        store = gpu_hours.ledger(self.db)
        if store is None:
            raise web.HTTPError(503, "the GPU-hour ledger cannot read the hub's database; the hub's log says why")
        return store

    def finish_json(self, body: Any) -> None:
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(body))


def user_usage(settings: Any, store: Any, user: Any) -> dict[str, Any]:
    """The body of ``GET /hub/api/users/{name}/gpu-usage`` for ``user`` (an orm or hub User)."""
    who = principal_of(user)
    # retry_at: when a 1-GPU server of weight 1 could start (gpu_hour_minimum_minutes of it)
    st = gpu_hours.standing(settings, store, who.name, who.groups, gpu_hours.minimum_need(settings, 1.0))
    v = st.verdict
    stops_at = st.runs_out_at() if settings.gpu_hour_stop_when_spent else None
    servers = [
        {
            "name": h.server, "pool": h.pool, "product": h.product, "gpus": h.gpus, "share": round(h.share, 4),
            "weight": h.weight, "gpu_hours_per_hour": _round(h.rate), "started": _iso(h.start),
            "gpu_hours": _round(h.hours(None, st.now)), "stops_at": _iso(stops_at),
        }
        for h in st.holdings if h.stop is None
    ]
    return {
        "gpu_hours": _round(v.used),
        "window": v.window.text if v.window is not None else "",
        "budget": v.budget,
        "remaining": _round(v.remaining),
        "retry_at": None if v.allowed else _iso(v.retry_at),
        "servers": servers,
    }


class UserGPUUsageHandler(_UsageHandler):
    """JSON: ``{"gpu_hours", "window", "budget", "remaining", "retry_at", "servers"}``."""

    async def get(self, user_name):
        current = self.signed_in()
        own = getattr(current, "kind", None) == "user" and current.name == user_name
        if not own and not self.allowed(f"user={user_name}"):
            raise web.HTTPError(403, f"reading the GPU usage of {user_name} needs the scope {SCOPE} "
                                     f"(or {SCOPE}!user={user_name}); see docs/access.md")
        user = orm.User.find(self.db, user_name)
        if user is None:
            raise web.HTTPError(404, f"no user named {user_name}")
        self.finish_json(user_usage(self.capacity_settings(), self.ledger(), user))


def _time_arg(value: str | None, name: str, default: datetime) -> datetime:
    if value is None or value == "":
        return default
    t = parse_time(value)
    if t is None:
        raise web.HTTPError(400, f"?{name}= must be an ISO 8601 date or time such as 2026-11-01 or "
                                 f"2026-11-01T00:00:00Z, not {value!r}")
    return t


def report(holdings: list[Any], since: datetime, until: datetime) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """GPU-hours between ``since`` and ``until`` per user and pool, and per pool."""
    per_user: dict[str, dict[str, float]] = {}
    per_pool: dict[str, float] = {}
    for h in holdings:
        x = h.hours(since, until)
        if x <= 0:
            continue
        per_user.setdefault(h.user, {}).setdefault(h.pool, 0.0)
        per_user[h.user][h.pool] += x
        per_pool[h.pool] = per_pool.get(h.pool, 0.0) + x
    return per_user, per_pool


def _cell(value: Any) -> Any:
    """A CSV cell that a spreadsheet will not run as a formula."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


class GPUUsageReportHandler(_UsageHandler):
    """Usage per user and per pool (``?group=NAME&since=...&until=...``), as JSON or CSV
    (``?format=csv`` or ``Accept: text/csv``)."""

    async def get(self):
        self.signed_in()
        group = self.get_argument("group", None)
        if group is not None and not group:
            raise web.HTTPError(400, "?group= must name a JupyterHub group")
        if not self.allowed(f"group={group}" if group else None):
            needed = f"{SCOPE}!group={group}" if group else SCOPE
            raise web.HTTPError(403, f"a GPU usage report needs the scope {needed}; see docs/access.md")
        now = clock.now()
        since = _time_arg(self.get_argument("since", None), "since", now - timedelta(days=REPORT_DAYS))
        until = _time_arg(self.get_argument("until", None), "until", now)
        if until <= since:
            raise web.HTTPError(400, f"?until= ({_iso(until)}) must come after ?since= ({_iso(since)})")
        users = None
        if group:
            g = orm.Group.find(self.db, group)
            if g is None:
                raise web.HTTPError(404, f"no group named {group}")
            users = [u.name for u in g.users]
        holdings = [h for h in self.ledger().for_users(users, since) if h.start < until]
        per_user, per_pool = report(holdings, since, until)
        fmt = self.get_argument("format", None)
        if fmt not in (None, "json", "csv"):
            raise web.HTTPError(400, f"?format= must be json or csv, not {fmt!r}")
        if fmt == "csv" or (fmt is None and "text/csv" in self.request.headers.get("Accept", "")):
            out = io.StringIO()
            writer = csv.writer(out)
            writer.writerow(["user", "pool", "gpu_hours", "since", "until"])
            for user in sorted(per_user):
                for pool in sorted(per_user[user]):
                    writer.writerow([_cell(user), _cell(pool), f"{per_user[user][pool]:.4f}", _iso(since), _iso(until)])
            self.set_header("Content-Type", "text/csv; charset=utf-8")
            self.set_header("Content-Disposition", 'attachment; filename="gpu-gpu_hours.csv"')
            self.set_header("Cache-Control", "no-store")
            self.finish(out.getvalue())
            return
        self.finish_json({
            "since": _iso(since), "until": _iso(until), "group": group,
            "gpu_hours": _round(sum(per_pool.values())),
            "users": [{"user": u, "gpu_hours": _round(sum(p.values())),
                       "pools": {k: _round(v) for k, v in sorted(p.items())}} for u, p in sorted(per_user.items())],
            "pools": [{"pool": p, "gpu_hours": _round(x)} for p, x in sorted(per_pool.items())],
        })


# what the config snippet appends to c.JupyterHub.extra_handlers
handlers = [(USER_PATH, UserGPUUsageHandler), (REPORT_PATH, GPUUsageReportHandler)]
