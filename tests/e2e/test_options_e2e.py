"""What a user asks is what starts, or a 400 says why; oversized bodies never reach the hub's database.

End to end against the demo's hub (Kubernetes' own control plane, real JupyterHub behind a real
configurable-http-proxy), over HTTP only: the same options sent as a REST body in either of
JupyterHub's request shapes, as a form post and as a query string start the same server, and
the same mistakes are refused the same way, each logged once.  Big bodies are sent as a hostile
client would, with the hub's event loop measured by the benchmark's probe
(``benchmarks/hubprobe.py``) and its SQLite database read afterwards.
"""

from __future__ import annotations

import html
import pathlib
import re
import shutil
import sqlite3

import pytest
import requests

from scripts.faults import concurrent_spawns
from tests.builders import rawhttp

from .harness import DemoHub, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.hub]

if not shutil.which("configurable-http-proxy"):
    pytest.skip(
        "configurable-http-proxy is not installed: run scripts/setup.sh (scripts/test.sh does)",
        allow_module_level=True,
    )

BENCHMARKS = pathlib.Path(__file__).resolve().parents[2] / "benchmarks"
# the most the hub's loop may be held by one step while a big body arrives (the figure)
STALL_MS = 25


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    where = tmp_path_factory.mktemp("options")
    db = where / "jupyterhub.sqlite"
    config = where / "extra_config.py"
    config.write_text(concurrent_spawns.SERVER_CONFIG + f"""
import sys
sys.path.insert(0, {str(BENCHMARKS)!r})
import hubprobe
hubprobe.install(c)
c.JupyterHub.db_url = "sqlite:///{db}"
""")
    # no culler: its service's requests would share the loop being measured
    h = DemoHub(extra_config=str(config), cull=False).start()
    h.db = db
    try:
        yield h
    finally:
        h.stop()


def a100(hub: DemoHub) -> dict:
    """A whole-GPU NVIDIA pool with 2 free GPUs on one node (not the demo's default, a MIG pool)."""
    pools = [p for p in hub.gpus()["pools"]
             if p["resource"] == "nvidia.com/gpu" and p["max_free_per_node"] >= 2
             and (p["cuda_version"] or "0").split(".")[0] >= "12"]
    assert pools, hub.gpus()["pools"]
    return pools[0]


def saved_options(hub: DemoHub, user: str) -> dict[str, str | None]:
    """The user options JupyterHub saved in its database, per server name."""
    with sqlite3.connect(hub.db) as db:
        rows = db.execute("SELECT s.name, s.user_options FROM spawners s JOIN users u ON s.user_id = u.id "
                          "WHERE u.name = ?", (user,)).fetchall()
    return dict(rows)


def log_mark(hub: DemoHub) -> int:
    return len(hub.log_path.read_text(errors="replace"))


def log_since(hub: DemoHub, mark: int) -> str:
    return hub.log_path.read_text(errors="replace")[mark:]


def form_action(session: requests.Session, hub: DemoHub, user: str) -> str:
    page = session.get(f"{hub.url}/hub/spawn/{user}", timeout=30)
    return html.unescape(re.search(r'<form[^>]*action="([^"]+)"', page.text).group(1))


# --- the same request, four ways: what starts is what was asked --------------------------------------------

def _rest_legacy(hub, user, options):
    r = hub.api("POST", f"/users/{user}/server", json=options)
    return r.status_code, r.text


def _rest_newer(hub, user, options):
    r = hub.api("POST", f"/users/{user}/server", json={"display_name": "", "user_options": options})
    return r.status_code, r.text


def _form(hub, user, options):
    session = hub.login(user)
    r = session.post(f"{hub.url}{form_action(session, hub, user)}", data=options, timeout=60, allow_redirects=False)
    return r.status_code, html.unescape(r.text)


def _form_fields(hub, user, options):
    """The page's own field names (``profile-option-<profile>--<option>``) for every option."""
    profile = options.get("profile", "cpu")
    fields = {(k if k == "profile" else f"profile-option-{profile}--{k}"): v for k, v in options.items()}
    return _form(hub, user, fields)


def _query(hub, user, options):
    session = hub.login(user)
    r = session.get(f"{hub.url}/hub/spawn/{user}", params=options, timeout=60, allow_redirects=False)
    return r.status_code, html.unescape(r.text)


SOURCES = {"rest-legacy": _rest_legacy, "rest-newer": _rest_newer, "form-rest-names": _form,
           "form-page-names": _form_fields, "query": _query}


@pytest.mark.parametrize("source", list(SOURCES))
def test_two_a100s_asked_any_way_start_two_a100s(hub, source):
    user = f"asker-{source}"
    hub.create_user(user)
    pool = a100(hub)
    status, text = SOURCES[source](hub, user, {"profile": "gpu", "gpu_pool": pool["id"], "gpus": "2"})
    assert status in (201, 202, 302), (status, text[:800])
    pods = wait_for(lambda: hub.pods("jupyterhub", labelSelector=f"hub.jupyter.org/username={user}"), 60,
                    f"{user}'s pod")
    pod = pods[0]
    assert pod["metadata"]["annotations"]["gpuspawner.io/pool"] == pool["id"]
    assert pod["spec"]["containers"][0]["resources"]["limits"][pool["resource"]] == "2"
    assert hub.api("DELETE", f"/users/{user}/server").status_code in (202, 204)
    hub.wait_stopped(user)


# --- the same mistakes, every way: a 400 that names them, no pod, nothing saved, one log line ----------------

MISTAKES = [
    ("unknown-name", {"profile": "gpu", "gpus": "1", "colour": "blue"}, "`colour`"),
    ("steering-key", {"profile": "gpu", "gpus": "1", "node_selector": "gpu=yes"}, "may not set `node_selector`"),
    ("image-on-a-static-profile", {"profile": "cpu", "image": "evil/image"}, "may not set `image`"),
    ("another-profiles-option", {"profile": "cpu", "gpus": "2"}, "profile 'cpu' has no GPUs, so `gpus` cannot be set"),
    ("not-a-count", {"profile": "gpu", "gpus": "2.0"}, "`gpus` must be a whole number of GPUs"),
]


@pytest.mark.parametrize("source", list(SOURCES))
@pytest.mark.parametrize("kind, options, words", MISTAKES, ids=[m[0] for m in MISTAKES])
def test_a_mistake_is_refused_the_same_way_whatever_carries_it(hub, source, kind, options, words):
    user = f"mistake-{source}-{kind}"
    hub.create_user(user)
    before = saved_options(hub, user)
    mark = log_mark(hub)
    status, text = SOURCES[source](hub, user, options)
    assert status == 400, (status, text[:800])
    assert words in text, text[:800]
    assert not hub.pods("jupyterhub", labelSelector=f"hub.jupyter.org/username={user}")
    assert not (hub.server(user) or {}).get("pending")
    assert saved_options(hub, user) == before  # the refused options were never saved
    lines = [line for line in log_since(hub, mark).splitlines() if words in line]
    assert len(lines) == 1, lines


@pytest.mark.parametrize("source", list(SOURCES))
def test_a_refusal_at_the_start_is_logged_once_and_its_options_are_not_kept(hub, source):
    """Room in a pool is decided when the server starts, after JupyterHub saved the options."""
    user = f"greedy-{source}"
    hub.create_user(user)
    mark = log_mark(hub)
    status, text = SOURCES[source](hub, user, {"profile": "gpu", "gpu_pool": a100(hub)["id"], "gpus": "1000"})
    assert status == 400 and "choose between 1 and " in text, (status, text[:800])
    lines = [line for line in log_since(hub, mark).splitlines() if "choose between 1 and " in line]
    assert len(lines) == 1 and lines[0].startswith("[I ") and f"Refused spawn of {user} (too_many_gpus)" in lines[0]
    assert saved_options(hub, user) == {"": "{}"}  # saved by JupyterHub before the start, then forgotten


@pytest.mark.parametrize(
    "data, words",
    [
        ({"profile": "gpu", "gpus": ["1", "2"]}, "given more than once: `gpus`"),
        ({"profile": "gpu", "gpus": "2", "profile-option-gpu--gpus": "1"}, "option `gpus` is given twice in the form"),
        ({"profile": "cpu", "profile-option-gpu--node_selector": "x"},
         "`profile-option-gpu--node_selector` is an option of profile 'gpu', but the form chooses profile 'cpu'"),
    ],
    ids=["a-name-twice", "both-spellings", "another-profiles-unknown-field"],
)
def test_a_form_that_says_two_things_is_refused(hub, data, words):
    hub.create_user("twice")
    status, text = _form(hub, "twice", data)
    assert status == 400 and words in text, (status, text[:800])
    assert not hub.pods("jupyterhub", labelSelector="hub.jupyter.org/username=twice")


@pytest.mark.parametrize(
    "body, words",
    [
        ({"profile": "gpu", "gpus": 2, "display_name": "Train"}, "would ignore `profile`, `gpus`"),
        ({"profile": "gpu", "gpus": 2, "user_options": None}, "would ignore `profile`, `gpus`"),
    ],
    ids=["options-beside-display-name", "options-beside-null-user-options"],
)
def test_a_rest_body_that_would_lose_its_options_is_refused(hub, body, words):
    """JupyterHub 6 read these as its newer shape, dropped the options and started the default
    CPU server with 201 where 2 GPUs were asked."""
    hub.create_user("shapes")
    mark = log_mark(hub)
    r = hub.api("POST", "/users/shapes/servers/train", json=body)
    assert r.status_code == 400 and words in r.json()["message"], r.text
    assert not hub.pods("jupyterhub", labelSelector="hub.jupyter.org/username=shapes")
    assert "train" not in saved_options(hub, "shapes")
    assert len([line for line in log_since(hub, mark).splitlines() if words in line]) == 1


def test_an_option_name_reaches_the_log_escaped_on_one_line(hub):
    hub.create_user("escaper")
    mark = log_mark(hub)
    r = hub.api("POST", "/users/escaper/server", json={"profile": "gpu", "bad\x00name\n[E 2026] forged": 1})
    assert r.status_code == 400 and "`bad\\x00name\\n[E 2026] forged`" in r.json()["message"], r.text
    log = log_since(hub, mark)
    assert "\x00" not in log and not any(line.startswith("[E 2026] forged") for line in log.splitlines())
    lines = [line for line in log.splitlines() if "bad\\x00name\\n[E 2026] forged" in line]
    assert len(lines) == 1 and "Refused spawn of escaper (forbidden_option)" in lines[0], lines


# --- options saved for later (PUT, PATCH) follow the same rules ------------------------------------------------

def test_put_and_patch_save_only_options_that_could_start(hub):
    hub.create_user("saver")
    r = hub.api("PUT", "/users/saver/servers/later",
                json={"user_options": {"profile": "gpu", "gpus": 1, "node_selector": {"a": "b"}}})
    assert r.status_code == 400 and "may not set `node_selector`" in r.json()["message"], r.text
    assert "later" not in saved_options(hub, "saver")
    r = hub.api("PUT", "/users/saver/servers/later", json={"user_options": {"profile": "gpu", "gpus": 1}})
    assert r.status_code == 201, r.text
    for body, words in [
        ({"user_options": {"profile": "gpu", "colour": "blue"}}, "unknown option(s) `colour` for profile 'gpu'"),
        ({"user_options": {"profile": "gpu", "note": "x" * 9000}}, "user options may be at most 8,192 bytes"),
        ({"options": {"profile": "gpu"}}, "a server can be changed in `name`, `display_name`, `user_options` only"),
    ]:
        r = hub.api("PATCH", "/users/saver/servers/later", json=body)
        assert r.status_code == 400 and words in r.json()["message"], r.text
    r = hub.api("PATCH", "/users/saver/servers/later", data=b'{"user_options": {"x": "' + b"y" * 5_000_000 + b'"}}')
    assert r.status_code == 413, r.text
    assert '"gpus": 1' in saved_options(hub, "saver")["later"]  # unchanged by every refused PATCH


# --- big bodies: refused before they are read, the loop never held, nothing stored ----------------------------

def _probe(hub: DemoHub, reset: bool = False) -> dict:
    return requests.get(f"{hub.url}/hub/bench/probe", params={"reset": "1"} if reset else {}, timeout=30).json()


def _json_body(size: int, block: int = 1 << 20):
    """A valid JSON object of exactly ``size`` bytes (options with one long note), sent in 1 MiB parts."""
    head, tail = b'{"profile": "cpu", "note": "', b'"}'
    yield head
    left = size - len(head) - len(tail)
    while left > 0:
        n = min(block, left)
        yield b"a" * n
        left -= n
    yield tail


def _send_big(hub: DemoHub, user: str, token: str, size: int, *, chunked: bool = False) -> tuple[int, dict, dict]:
    _probe(hub, reset=True)
    length = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {size}"
    body = rawhttp.chunked(_json_body(size)) if chunked else _json_body(size)
    status, answer = rawhttp.exchange(
        hub.port, f"POST /hub/api/users/{user}/server HTTP/1.1\nHost: hub\nAuthorization: token {token}\n"
                  f"Content-Type: application/json\n{length}", body)
    figures = _probe(hub)
    print(f"{size / 1e6:.0f} MB{' chunked' if chunked else ''} body: {status}; loop worst stall "
          f"{figures['worst_stall_ms']} ms wall, {figures['worst_on_cpu_ms']} ms on its CPU, longest request step "
          f"{figures['longest_step_ms']['request']} ms; RSS {figures['rss_bytes'] / 2**20:.0f} MiB; "
          f"database {hub.db.stat().st_size / 2**10:.0f} KiB")
    return status, answer, figures


def _assert_not_read(hub: DemoHub, user: str, status: int, answer, figures: dict, rss_before: int) -> None:
    assert status == 413, answer
    assert answer["message"].startswith("the request body may be at most 65,536 bytes")
    # the loop: no step of the hub's held it, and in no 5 ms tick did the loop's own thread
    # work over the figure (the tick's wall time also counts waiting for a core on a busy machine)
    assert figures["longest_step_ms"]["request"] <= STALL_MS, figures
    assert figures["worst_on_cpu_ms"] <= STALL_MS, figures
    assert figures["rss_bytes"] - rss_before < 20 * 2**20, figures  # the body never held in memory
    assert all(len(v or "") < 1000 for v in saved_options(hub, user).values())
    assert hub.db.stat().st_size < 5 * 2**20  # SQLite never shrinks: a stored body would stay


def test_a_100_mb_body_is_refused_before_it_is_read(hub):
    hub.create_user("hundred")
    rss = _probe(hub)["rss_bytes"]
    status, answer, figures = _send_big(hub, "hundred", hub.token, 100_000_000)
    _assert_not_read(hub, "hundred", status, answer, figures, rss)


def test_a_non_admin_token_with_60_mb_is_refused_the_same_way(hub):
    hub.create_user("nina")
    r = hub.api("POST", "/users/nina/tokens", json={"note": "e2e big body"})
    assert r.status_code == 201, r.text
    rss = _probe(hub)["rss_bytes"]
    status, answer, figures = _send_big(hub, "nina", r.json()["token"], 60_000_000)
    _assert_not_read(hub, "nina", status, answer, figures, rss)


def test_a_chunked_body_is_refused_once_it_passes_the_limit(hub):
    hub.create_user("chunks")
    rss = _probe(hub)["rss_bytes"]
    status, answer, figures = _send_big(hub, "chunks", hub.token, 20_000_000, chunked=True)
    _assert_not_read(hub, "chunks", status, answer, figures, rss)


def test_a_spawn_form_post_over_the_limit_is_413(hub):
    hub.create_user("formbig")
    session = hub.login("formbig")
    r = session.post(f"{hub.url}{form_action(session, hub, 'formbig')}",
                     data={"profile": "cpu", "note": "x" * 200_000}, timeout=60)
    assert r.status_code == 413 and r.json()["message"].startswith("the request body may be at most 65,536 bytes")
    assert not hub.server("formbig")
