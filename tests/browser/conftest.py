"""Browser tests of the spawn page: ``gpuspawner demo`` (Kubernetes' own control plane with the node
agent's simulated GPU nodes, a real JupyterHub and configurable-http-proxy, the demo's culler and
Prometheus) driven by Debian's headless Chromium through Playwright.

Chromium comes from the system (``scripts/setup.sh --browser`` installs Debian's ``chromium``);
Playwright never downloads a browser here. Screenshots of the spawn page are written to
``test-artifacts/`` at the repository root (gitignored; CI keeps them as artifacts).
"""

from __future__ import annotations

import itertools
import os
import pathlib
import shutil
import tempfile

import pytest

from ..e2e.harness import DemoCommand
from ..e2e.kubeconfig import kubeconfig_session

ROOT = pathlib.Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
# Debian's package (scripts/setup.sh --browser); GPUSPAWNER_CHROMIUM points at another build
CHROMIUM = os.environ.get("GPUSPAWNER_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
# the namespace the tests' own GPU pods go to: another team's workload, as the hub sees it
LOAD_NAMESPACE = "browser-load"
# the group that may use the MIG 3g.40gb pool when per-group pool access exists
MIG_GROUP = "mig-team"
MIG_3G_POOL = "*:nvidia.com/mig-3g.40gb"

_pod_numbers = itertools.count()

PYTORCH_IMAGE = "quay.io/jupyter/pytorch-notebook:cuda12-2025-01-06"
LEGACY_IMAGE = "quay.io/jupyter/tensorflow-notebook:cuda-2023-06-01"
# the demo's GPU profile with an image choice, so each pool card shows a CUDA fit per image
GPU_PROFILE = {
    "slug": "gpu",
    "display_name": "GPU server",
    "description": "A notebook server on the GPU pool you choose.",
    "kubespawner_override": {"cpu_limit": 2, "mem_limit": "16G"},
    "max_gpus": 8,
    "profile_options": {
        "image": {
            "display_name": "Image",
            "choices": {
                "pytorch": {
                    "display_name": "PyTorch, CUDA 12.4",
                    "default": True,
                    "kubespawner_override": {"image": PYTORCH_IMAGE},
                    "cuda": "12.4",
                },
                "legacy": {
                    "display_name": "Legacy TensorFlow, CUDA 11.2",
                    "kubespawner_override": {"image": LEGACY_IMAGE},
                    "cuda": "11.2",
                },
            },
        }
    },
}


AXE = ROOT / "node_modules" / "axe-core" / "axe.min.js"


def axe_serious(page) -> tuple[list, dict]:
    """axe-core (from the npm registry, ``node_modules/axe-core``) run on the page for WCAG 2.1 A and AA:
    its serious and critical violations (rule, impact, first nodes, why) and its whole result."""
    if not AXE.is_file():
        pytest.fail(f"axe-core is not installed at {AXE}: run scripts/setup.sh (npm ci)")
    page.add_script_tag(path=str(AXE))
    result = page.evaluate(
        """() => axe.run(document, {runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa']}})"""
    )
    bad = [
        (v["id"], v["impact"], [n["target"] for n in v["nodes"]][:5], v["nodes"][0].get("failureSummary", ""))
        for v in result["violations"]
        if v["impact"] in ("serious", "critical")
    ]
    return bad, result


def chromium_missing() -> str | None:
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        return (
            f"Chromium is not installed at {CHROMIUM}: run scripts/setup.sh --browser "
            "(apt-get install chromium), or set GPUSPAWNER_CHROMIUM to a Chromium binary"
        )
    if not shutil.which("configurable-http-proxy"):
        return "configurable-http-proxy is not installed: run scripts/setup.sh"
    return None


def demo_config(workdir: pathlib.Path) -> pathlib.Path:
    """Settings on top of the demo's (which renders the shipped templates): a GPU profile with an image
    choice (so each pool card shows a CUDA fit per image), and per-group access to one pool."""
    rule = {"match": MIG_3G_POOL, "allowed_groups": [MIG_GROUP]}
    lines = [
        f"c.GPUSpawner.gpu_profiles = [{GPU_PROFILE!r}]",
        f"c.GPUSpawner.gpu_pool_rules = [{rule!r}]",
    ]
    path = workdir / "extra_config.py"
    path.write_text("\n".join(lines) + "\n")
    return path


class BrowserHub(DemoCommand):
    """``gpuspawner demo`` itself, as a user runs it (Kubernetes' own control plane, the node agent, the
    hub, its culler and Prometheus), with ``DemoHub``'s HTTP helpers; ``k8s_url``/``k8s`` reach the API
    server as its admin through the kubeconfig the demo writes (``--kubeconfig``)."""

    def __init__(self, cluster_file: str | None = None, extra_config: str | None = None):
        self.kubeconfig = pathlib.Path(tempfile.mkdtemp(prefix="gpuspawner-browser-")) / "kubeconfig"
        super().__init__(cluster_file, extra_args=("--kubeconfig", str(self.kubeconfig)), extra_config=extra_config)

    def _start(self) -> None:
        super()._start()
        self.k8s_url, self.k8s = kubeconfig_session(self.kubeconfig)


@pytest.fixture(scope="package")
def hub(tmp_path_factory):
    """The demo's hub on the default cluster, shared by the package's modules (a start of the demo's
    control plane, nodes, hub and Prometheus takes 20 to 40 s here): each module's users are its own, and
    what a module holds on the cluster it gives back before it ends."""
    reason = chromium_missing()
    if reason:
        pytest.skip(reason)
    workdir = tmp_path_factory.mktemp("spawn-page")
    h = BrowserHub(extra_config=str(demo_config(workdir))).start()
    try:
        yield h
    finally:
        h.stop()


@pytest.fixture(scope="module")
def browser(hub):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def new_page(browser):
    """``new_page(javascript=True)``: a page in a fresh browser context (its own cookies)."""
    contexts = []
    errors: list[str] = []

    def make(javascript: bool = True):
        ctx = browser.new_context(
            java_script_enabled=javascript, viewport={"width": 1280, "height": 1800}
        )
        ctx.set_default_timeout(30_000)
        contexts.append(ctx)
        page = ctx.new_page()
        # an uncaught exception in the page's scripts fails the test
        page.on("pageerror", lambda exc: errors.append(f"{page.url}: {exc}"))
        return page

    yield make
    for ctx in contexts:
        ctx.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


@pytest.fixture
def screenshot():
    """``screenshot(page, name)``: the whole page to test-artifacts/spawn-page-<name>.png."""

    def take(page, name: str) -> pathlib.Path:
        ARTIFACTS.mkdir(exist_ok=True)
        path = ARTIFACTS / f"spawn-page-{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return take


@pytest.fixture
def login(hub):
    """``login(page, user)``: sign in through the hub's login form (the demo's dummy
    authenticator takes any password)."""

    def sign_in(page, user: str) -> None:
        page.goto(f"{hub.url}/hub/login")
        page.fill("#username_input", user)
        page.fill("#password_input", "any-password")
        page.click("#login_submit")
        page.wait_for_url(lambda url: "/hub/login" not in url)

    return sign_in


class ClusterLoad:
    """GPU pods of another team, created and deleted through the API server as its admin, as
    `kubectl` would: the hub sees them only through its watch."""

    def __init__(self, hub: BrowserHub):
        self.hub = hub
        self.names: list[str] = []
        r = hub.k8s.post(
            f"{hub.k8s_url}/api/v1/namespaces",
            json={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": LOAD_NAMESPACE}},
            timeout=30,
        )
        assert r.status_code in (201, 409), r.text

    def hold(self, node: str, gpus: int, resource: str = "nvidia.com/gpu") -> str:
        name = f"load-{next(_pod_numbers)}-{node[:20].strip('-.')}"
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": LOAD_NAMESPACE,
            },
            "spec": {
                # bound by name, as the scheduler would: the node's kubelet (the node agent) admits it
                # and, as its container has no command, runs it with no process behind it
                "nodeName": node,
                "tolerations": [{"operator": "Exists"}],
                "containers": [
                    {
                        "name": "load",
                        "image": "busybox:1.36",
                        "resources": {
                            "requests": {resource: str(gpus)},
                            "limits": {resource: str(gpus)},
                        },
                    }
                ],
            },
        }
        r = self.hub.k8s.post(
            f"{self.hub.k8s_url}/api/v1/namespaces/{LOAD_NAMESPACE}/pods", json=pod, timeout=30
        )
        assert r.status_code == 201, r.text
        self.names.append(name)
        return name

    def release(self, name: str) -> None:
        r = self.hub.k8s.delete(
            f"{self.hub.k8s_url}/api/v1/namespaces/{LOAD_NAMESPACE}/pods/{name}",
            params={"gracePeriodSeconds": "0"},
            timeout=30,
        )
        assert r.status_code in (200, 202, 404), r.text
        self.names.remove(name)

    def release_all(self) -> None:
        for name in list(self.names):
            self.release(name)


@pytest.fixture
def load(hub):
    cl = ClusterLoad(hub)
    yield cl
    cl.release_all()

