"""``GET /hub/api/users/{name}/gpu-usage`` and ``GET /hub/api/gpu-usage`` in a JupyterHub MockHub (no proxy,
no cluster) on SQLite and PostgreSQL: exact keys, the custom scope, JSON and CSV reports."""

from __future__ import annotations

import csv
import io
import json

import pytest
from jupyterhub import orm
from tornado.httpclient import AsyncHTTPClient, HTTPClientError

from gpuspawner.hub import gpu_hours as gpu_hours
from gpuspawner.hub.gpu_hours_page import home_context, home_vars, standing_words
from gpuspawner.usage import clock, store
from gpuspawner.usage.store import UsageStore
from tests.builders.usage import NOW, holding
from tests.hub.test_handlers import load_snippet

A100 = "a100:nvidia-a100:nvidia.com/gpu"
T4 = "t4:tesla-t4:nvidia.com/gpu"
KEYS = {"gpu_hours", "window", "budget", "remaining", "retry_at", "servers"}


@pytest.fixture
async def hub(db_url, monkeypatch, mock_hub):
    """A hub with budgets and groups; its ledger holds ann's and bob's holdings. Yields (api url, tokens)."""
    monkeypatch.setenv("JUPYTERHUB_TEST_DB_URL", db_url)
    clock.set_source(lambda: NOW)
    store._ready.clear()
    c = load_snippet()
    c.GPUSpawner.gpu_hour_budgets = [{"scope": "everyone", "gpu_hours": 2, "window": "1d"},
                                     {"scope": "group:research", "gpu_hours": 100, "window": "month"}]
    c.GPUSpawner.gpu_hour_weights = {"t4:*": 0.5}
    c.Authenticator.allowed_users = {"ann", "bob", "cy", "reader", "lead"}
    c.JupyterHub.load_groups = {"students": {"users": ["ann", "bob"]}, "research": {"users": ["cy"]}}
    c.JupyterHub.load_roles = [
        {"name": "usage-reader", "scopes": ["custom:gpu-usage:read"], "users": ["reader"]},
        {"name": "student-lead", "scopes": ["custom:gpu-usage:read!group=students"], "users": ["lead"]},
    ]
    served = await mock_hub(c)
    app, api = served.app, served.api
    ledger = UsageStore(app.db).ready()
    ledger.open(holding("2026-11-27 09:00", "2026-11-27 11:00", user="ann", pool=A100))  # 2 GPU-hours
    ledger.open(holding("2026-11-27 11:00", user="ann", server="big", pool=T4, gpus=2, weight=0.5), pod_uid="u1")
    ledger.open(holding("2026-11-26 00:00", "2026-11-26 03:00", user="bob", pool=A100))
    ledger.open(holding("2026-11-20 00:00", "2026-11-20 01:00", user="cy", pool=A100, gpus=4))
    tokens = {name: app.users[name].new_api_token() for name in ("ann", "bob", "cy", "reader", "lead")}
    try:
        yield api, tokens, app
    finally:
        await served.close()
        clock.set_source(None)


async def get(url, token, **headers):
    try:
        r = await AsyncHTTPClient().fetch(url, headers={"Authorization": f"token {token}", **headers},
                                          request_timeout=30)
    except HTTPClientError as e:
        return e.code, e.response.body.decode()
    return r.code, r.body.decode() if "csv" in r.headers.get("Content-Type", "") else json.loads(r.body)


async def test_a_user_reads_their_own_usage(hub):
    api, tokens, _ = hub
    code, body = await get(api + "users/ann/gpu-usage", tokens["ann"])
    assert code == 200 and set(body) == KEYS
    # 2 GPU-hours 9-11, then 1 hour of 2 T4s weighted 0.5: 3 of 2 GPU-hours in the last day
    assert (body["gpu_hours"], body["window"], body["budget"], body["remaining"]) == (3.0, "1d", 2.0, 0.0)
    # 10 minutes of one GPU must be free: 1/6 below the budget once 9:00-10:10 leaves the window
    assert body["retry_at"] == "2026-11-28T10:10:00Z"
    [server] = body["servers"]
    assert (server["name"], server["pool"], server["gpus"], server["gpu_hours"], server["gpu_hours_per_hour"]) == \
        ("big", T4, 2, 1.0, 1.0)
    assert server["stops_at"] is None  # a running server is not stopped for its budget unless the admin asks


async def test_no_retry_time_while_a_server_could_start(hub):
    api, tokens, _ = hub
    code, body = await get(api + "users/cy/gpu-usage", tokens["cy"])
    assert code == 200
    assert (body["gpu_hours"], body["window"], body["budget"], body["remaining"], body["retry_at"]) == \
        (4.0, "month", 100.0, 96.0, None)


@pytest.mark.parametrize("reader, user, code", [
    ("bob", "ann", 403), ("reader", "ann", 200), ("lead", "ann", 200), ("lead", "cy", 403), ("reader", "nobody", 404),
], ids=["other-user", "scope", "group-filtered-scope", "outside-the-group", "no-such-user"])
async def test_reading_another_users_usage_needs_the_scope(hub, reader, user, code):
    api, tokens, _ = hub
    got, body = await get(api + f"users/{user}/gpu-usage", tokens[reader])
    assert got == code, body
    if code == 403:
        assert "custom:gpu-usage:read" in body


async def test_report_per_user_and_pool(hub):
    api, tokens, _ = hub
    code, body = await get(api + "gpu-usage?since=2026-11-01", tokens["reader"])
    assert code == 200
    assert body["users"] == [
        {"user": "ann", "gpu_hours": 3.0, "pools": {A100: 2.0, T4: 1.0}},
        {"user": "bob", "gpu_hours": 3.0, "pools": {A100: 3.0}},
        {"user": "cy", "gpu_hours": 4.0, "pools": {A100: 4.0}},
    ]
    assert body["pools"] == [{"pool": A100, "gpu_hours": 9.0}, {"pool": T4, "gpu_hours": 1.0}]
    assert body["gpu_hours"] == 10.0


async def test_report_of_a_group_as_csv(hub):
    api, tokens, _ = hub
    for url, headers in ((api + "gpu-usage?group=students&since=2026-11-26T12:00:00Z&format=csv", {}),
                         (api + "gpu-usage?group=students&since=2026-11-26T12:00:00Z", {"Accept": "text/csv"})):
        code, text = await get(url, tokens["lead"], **headers)
        assert code == 200, text
        rows = list(csv.DictReader(io.StringIO(text)))
        assert [(r["user"], r["pool"], r["gpu_hours"]) for r in rows] == [
            ("ann", A100, "2.0000"), ("ann", T4, "1.0000")]


@pytest.mark.parametrize("who, query, code, says", [
    ("lead", "", 403, "custom:gpu-usage:read"),
    ("bob", "?group=students", 403, "custom:gpu-usage:read!group=students"),
    ("reader", "?group=nobody", 404, "no group named nobody"),
    ("reader", "?since=last-week", 400, "ISO 8601"),
    ("reader", "?since=2026-11-02&until=2026-11-01", 400, "must come after"),
    ("reader", "?format=xml", 400, "json or csv"),
], ids=["everyone-needs-unfiltered-scope", "group-needs-scope", "unknown-group", "bad-since", "until-before-since",
        "bad-format"])
async def test_report_refusals_say_why(hub, who, query, code, says):
    api, tokens, _ = hub
    got, body = await get(api + "gpu-usage" + query, tokens[who])
    assert got == code and says in body


async def test_home_page_words(hub):
    _api, _tokens, app = hub
    settings = app.config
    from gpuspawner.hub.settings import GPUSpawnerSettings
    from gpuspawner.hub.spawner import GPUSpawner

    s = GPUSpawnerSettings.from_hub_config(settings, GPUSpawner)
    s.gpu_hour_stop_when_spent = True
    user = orm.User.find(app.db, "ann")
    st = gpu_hours.standing(s, UsageStore(app.db), "ann", ["students"], 0)
    context = home_context(s, st)
    assert context["standing"] == ("You have 0 of your 2 GPU-hours left in the last day; "
                                   "1.02 GPU-hours come back on 28 November at 10:01 UTC.")
    # the pool by the name users read (here its node group: no capacity snapshot names it), never its id
    assert context["servers"] == [{"name": "big", "gpus": 2, "pool": T4.split(":")[0], "rate": "1", "cost": "1"}]
    named = home_context(s, st, {T4: ("NVIDIA T4", "T4 for teaching")})
    assert named["servers"][0]["pool"] == "T4 for teaching"
    assert context["warning"].startswith("Your GPU-hour budget runs out on 27 November at 12:00 UTC")
    assert user is not None and standing_words(st) == context["standing"]


async def test_the_home_pages_gpu_hours_are_read_only_when_the_home_page_reads_them(hub):
    """JupyterHub calls a template variable's callable on every page it renders (the spawn page, the
    token page...): the ledger is queried when the home page reads the section, not before."""
    _api, _tokens, app = hub
    from gpuspawner.hub.settings import GPUSpawnerSettings
    from gpuspawner.hub.spawner import GPUSpawner

    asked = []

    def settings_of():
        asked.append(1)
        return GPUSpawnerSettings.from_hub_config(app.config, GPUSpawner)

    ann = app.users[orm.User.find(app.db, "ann")]
    value = home_vars(settings_of)(ann)  # what every page gets
    assert asked == []
    section = value.read()  # what the home page's template calls
    assert asked == [1]
    assert section["standing"].startswith("You have 0 of your 2 GPU-hours left in the last day")
    assert home_vars(settings_of)(None) is None  # no user signed in: nothing to read
