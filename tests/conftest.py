"""Shared test setup and fixtures (the builders themselves are in ``tests/builders/``).

The end-to-end tests run JupyterHub with a real configurable-http-proxy; make the copy that
scripts/setup.sh installs (node_modules/.bin) findable when pytest is started by hand.
In CI (``CI=true``) a skipped browser, hub or kubectl test fails the run (``tests/ci_skips.py``).
"""

import json
import os
import pathlib
import ssl
import urllib.request

import pytest

from testcluster import ControlPlane, ControlPlaneError, find_binary
from tests.ci_skips import pytest_collectreport, pytest_configure, pytest_runtest_makereport  # noqa: F401 (hooks)

ROOT = pathlib.Path(__file__).resolve().parent.parent
_node_bin = ROOT / "node_modules" / ".bin"
if _node_bin.is_dir() and str(_node_bin) not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = f"{_node_bin}{os.pathsep}{os.environ.get('PATH', '')}"


@pytest.fixture
def no_kube_client(monkeypatch):
    """A spawner without a cluster: KubeSpawner's ``__init__`` loads a kube config and makes its
    API client through ``kubespawner.spawner.load_config`` and ``shared_client``
    (kubespawner/spawner.py); they are replaced by stand-ins, and nothing else is.  The test
    gives the spawner its ``user`` and ``hub`` itself (``builders.make_spawner``)."""
    import kubespawner.spawner

    monkeypatch.setattr(kubespawner.spawner, "load_config", lambda *a, **kw: None)
    monkeypatch.setattr(kubespawner.spawner, "shared_client", lambda *a, **kw: object())


# JupyterHub in-process: pytest-jupyterhub's ``configured_mockhub_instance`` (a declared test dependency)
# makes the MockHub; ``mock_hub`` initializes and serves it. Its other fixture, ``hub_app``, also starts
# the hub (configurable-http-proxy, the hub's own server, its periodic tasks) and closes neither the
# database nor gpuspawner's shared capacity cache: the hub tests need only the tornado application on a
# loopback port, and a database they can reopen (a hub restart), so they do not use it. The end-to-end
# tests run ``gpuspawner demo`` or ``jupyterhub`` as processes (tests/e2e/harness.py), as admins do.
@pytest.fixture
async def mock_hub(configured_mockhub_instance):
    """``await mock_hub(c)``: a ``builders.mockhub.ServedHub`` of the config ``c``; every hub the test
    made is closed after it (``ServedHub.close`` closes one earlier, for a hub restart)."""
    from tests.builders import mockhub

    hubs = []

    async def serve(c):
        served = await mockhub.serve(configured_mockhub_instance, c)
        hubs.append(served)
        return served

    yield serve
    for served in reversed(hubs):
        await served.close()


@pytest.fixture
def install_cache(monkeypatch):
    """``install_cache(cache)``: every spawner and ``GET /hub/api/gpus`` of the test read
    ``cache`` (a ``builders.FakeCache``) instead of starting the shared ``CapacityCache``."""
    from gpuspawner.hub.settings import GPUSpawnerSettings

    def install(cache):
        monkeypatch.setattr(GPUSpawnerSettings, "shared_capacity_cache", lambda self: cache)
        return cache

    return install


@pytest.fixture(autouse=True)
def _gpuspawner_logger_restored():
    """A test whose hub routed ``gpuspawner.*`` through its logger (``hub.hub_log.adopt``) leaves
    the next test the logger as it found it (propagating to the root, where caplog listens)."""
    import logging

    package = logging.getLogger("gpuspawner")
    saved = (package.handlers[:], package.level, package.propagate)
    yield
    package.handlers[:], package.level, package.propagate = saved
@pytest.fixture(scope="session")
def postgres():
    """A throwaway PostgreSQL cluster for the session (``builders.postgres.Postgres``), from Debian's
    ``postgresql`` package (scripts/setup.sh installs it); skipped where it is not installed."""
    from tests.builders.postgres import Postgres

    pg = Postgres()
    if not pg.available:
        pytest.skip("PostgreSQL's initdb/pg_ctl are not installed (scripts/setup.sh installs Debian's postgresql)")
    pg.start()
    try:
        yield pg
    finally:
        pg.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    """A fresh database URL, SQLite and PostgreSQL (one database per test)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'jupyterhub.sqlite'}"
    pg = request.getfixturevalue("postgres")
    return pg.create_database(f"t{abs(hash(request.node.nodeid)) % 10**12}")


# the test cluster: one real control plane (``gpuspawner-cluster controlplane``) for the whole session,
# shared by every test that asks for it (tests/testcluster/conftest.py has its kubectl and API fixtures)


# the session's control plane once started ("cp"), and the nodes already reported on it ("reported")
_shared: dict = {}


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory):
    """A started control plane; fails (never skips) when the binary is missing: setup builds it."""
    try:
        find_binary()
    except ControlPlaneError as e:
        pytest.fail(str(e))
    cp = ControlPlane(tmp_path_factory.mktemp("controlplane"))
    cp.start()
    print(f"\ncontrol plane {cp.server} ready in {cp.ready_seconds:.1f}s")
    _shared.update(cp=cp, reported=set())
    yield cp
    _shared.clear()
    cp.stop()


def _admin_call(cp, method: str, path: str) -> dict:
    """One request to the control plane as its admin (its client certificate, its CA)."""
    pki = cp.data_dir / "pki"
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    request = urllib.request.Request(f"{cp.server}{path}", method=method, headers={"Accept": "application/json"})
    with urllib.request.urlopen(request, context=context, timeout=30) as r:
        return json.load(r)


@pytest.fixture(autouse=True, scope="module")
def _no_node_left_on_the_shared_control_plane():
    """The session's control plane is shared: a module that leaves a Node there (kube-scheduler's
    messages count every node, a pod may be bound to it) fails, naming the nodes, which are then
    deleted so that the later modules run on a clean cluster.  One list of nodes per module, and
    only once the control plane runs."""
    yield
    cp = _shared.get("cp")
    if cp is None:
        return
    left = sorted({n["metadata"]["name"] for n in _admin_call(cp, "GET", "/api/v1/nodes")["items"]}
                  - _shared["reported"])
    if not left:
        return
    _shared["reported"].update(left)
    for name in left:
        try:
            _admin_call(cp, "DELETE", f"/api/v1/nodes/{name}")
        except OSError:  # reported below either way
            pass
    pytest.fail(f"this module left {len(left)} node(s) on the session's shared control plane: {', '.join(left)}; "
                "delete what the module registers (tests/builders/nodeagent.py's loaded or "
                "remove_file_objects do)", pytrace=False)


@pytest.fixture(scope="session")
def real_cluster(control_plane):
    """The kubeconfig of the session's real control plane (kube-apiserver, kube-scheduler,
    kube-controller-manager)."""
    return pathlib.Path(control_plane.kubeconfig)
