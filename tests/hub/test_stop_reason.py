"""Why Kueue stopped a server (preempted, evicted) survives a hub restart: JupyterHub saves it with the
spawner's state when it cleans up the stopped server, and the restarted hub's home page still says it,
until the user starts the server again. Two MockHubs, one after the other, on one database file."""

from __future__ import annotations

from jupyterhub import orm
from tornado.httpclient import AsyncHTTPClient

from gpuspawner.hub import kueue_wait as queue_glue
from tests.hub.test_handlers import load_snippet, login

PREEMPTED = ("Preempted in gpu-a100: a server with higher priority needed its GPU quota. Start it again "
             "to queue once more.")


async def home(hub_url: str) -> str:
    cookie = await login(hub_url, "user")
    r = await AsyncHTTPClient().fetch(hub_url + "home", headers={"Cookie": cookie}, request_timeout=30)
    return r.body.decode()


async def test_the_stop_reason_is_on_the_home_page_after_a_hub_restart(no_kube_client, tmp_path, monkeypatch,
                                                                        mock_hub):
    monkeypatch.setenv("JUPYTERHUB_TEST_DB_URL", f"sqlite:///{tmp_path / 'jupyterhub.sqlite'}")
    first = await mock_hub(load_snippet())
    app = first.app
    try:
        user = app.users["user"]
        spawner = user.spawner
        spawner.orm_spawner.server = orm.Server()  # a running server ...
        app.db.commit()

        async def pod_gone():  # ... whose pod Kueue evicted: the hub finds it stopped
            return 0

        spawner.poll = pod_gone
        spawner.gpu_stop_message = PREEMPTED  # what queue.note_stopped keeps when the poll finds it gone
        await user.stop("")  # JupyterHub's own clean-up of a stopped server saves the spawner's state
        assert spawner.orm_spawner.state.get(queue_glue.STOP_STATE_KEY) == PREEMPTED
    finally:
        await first.close()

    # the hub restarts: a new process, nothing in memory, the same database (MockHub would empty it)
    from jupyterhub.tests.mocking import MockHub

    monkeypatch.setattr(MockHub, "test_clean_db", False)  # a trait without config=True
    second = await mock_hub(load_snippet())
    app = second.app
    try:
        page = await home(second.hub_url)
        assert f"Your last server was stopped: {PREEMPTED}" in page
        # the next start clears it, and the state saved after that start no longer holds it
        spawner = app.users["user"].spawner
        queue_glue.extend_start_timeout(spawner)
        assert spawner.gpu_stop_message is None and queue_glue.STOP_STATE_KEY not in spawner.get_state()
    finally:
        await second.close()


BAD_STATES = {"not-a-string": {"gpu_stop_message": ["x"]}, "empty": {"gpu_stop_message": ""},
              "huge": {"gpu_stop_message": "x" * 100_000}}


def test_a_state_that_is_not_a_message_is_not_read():
    class S:
        gpu_stop_message = "old"

    for state, want in ((BAD_STATES["not-a-string"], None), (BAD_STATES["empty"], None)):
        s = S()
        queue_glue.load_stop(s, state)
        assert s.gpu_stop_message is want
    s = S()
    queue_glue.load_stop(s, BAD_STATES["huge"])
    assert len(s.gpu_stop_message) == queue_glue.MAX_STOP_MESSAGE
