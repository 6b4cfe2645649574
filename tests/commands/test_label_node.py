"""``gpuspawner label-node``: GFD label names from NVML, dry-run output, the Node merge patch."""

import json
import re

import pytest
import yaml
from aiohttp import web

from gpuspawner.commands import nvml
from gpuspawner.cli import build_parser
from gpuspawner.commands import label_node

from tests.builders import fake_pynvml

# Kubernetes label values: empty or <= 63 chars, alphanumeric at both ends, [-_.A-Za-z0-9] inside
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def labels_of(fixture):
    return label_node.labels_from_report(nvml.read(fake_pynvml(fixture)))


def test_a100_labels_match_the_reference_gfd_label_set():
    labels = labels_of("a100-mig-570")
    # the label values GFD writes for this node (an A100 with MIG), for the labels label-node writes
    expected = {
        "nvidia.com/cuda.driver-version.full": "570.172.08",
        "nvidia.com/cuda.driver-version.major": "570",
        "nvidia.com/cuda.driver-version.minor": "172",
        "nvidia.com/cuda.driver-version.revision": "08",
        "nvidia.com/cuda.driver.major": "570",
        "nvidia.com/cuda.driver.minor": "172",
        "nvidia.com/cuda.driver.rev": "08",
        "nvidia.com/cuda.runtime-version.full": "12.8",
        "nvidia.com/cuda.runtime-version.major": "12",
        "nvidia.com/cuda.runtime-version.minor": "8",
        "nvidia.com/cuda.runtime.major": "12",
        "nvidia.com/cuda.runtime.minor": "8",
        "nvidia.com/gpu.compute.major": "8",
        "nvidia.com/gpu.compute.minor": "0",
        "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.family": "ampere",
        "nvidia.com/gpu.memory": "81920",
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
        "nvidia.com/mig.capable": "true",
    }
    assert labels == expected


def test_t4_labels_from_an_old_bytes_binding():
    labels = labels_of("t4-535-bytes")
    assert labels["nvidia.com/cuda.driver-version.full"] == "535.183.01"
    assert labels["nvidia.com/cuda.runtime-version.full"] == "12.2"
    assert labels["nvidia.com/gpu.product"] == "Tesla-T4"
    assert labels["nvidia.com/gpu.memory"] == "15360"
    assert labels["nvidia.com/gpu.family"] == "turing"
    assert labels["nvidia.com/mig.capable"] == "false"


def test_old_binding_leaves_out_what_it_cannot_read():
    labels = labels_of("old-binding")
    assert "nvidia.com/cuda.runtime-version.full" not in labels
    assert "nvidia.com/gpu.compute.major" not in labels
    assert labels["nvidia.com/gpu.family"] == "undefined"


@pytest.mark.parametrize(
    "fixture", ["a100-mig-570", "t4-535-bytes", "geforce-4090-550", "v100-580", "old-binding"]
)
def test_every_value_is_a_valid_label_value(fixture):
    for key, value in labels_of(fixture).items():
        assert key.startswith("nvidia.com/")
        assert len(value) <= 63 and LABEL_VALUE.match(value), (key, value)


@pytest.mark.parametrize(
    "name, product",
    [
        ("NVIDIA A100-SXM4-80GB", "NVIDIA-A100-SXM4-80GB"),
        ("NVIDIA GeForce RTX 4090", "NVIDIA-GeForce-RTX-4090"),
        ("Tesla T4", "Tesla-T4"),
        ("NVIDIA H100 80GB HBM3 (rev/a)", "NVIDIA-H100-80GB-HBM3-reva"),
        ("  weird **name** ", "weird-name"),
        ("X" * 80, "X" * 63),
        ("-a-", "a"),
    ],
)
def test_product_sanitising(name, product):
    assert label_node.sanitise_product(name) == product


@pytest.mark.parametrize(
    "arch, family",
    [
        ("3.7", "kepler"),
        ("6.0", "pascal"),
        ("7.0", "volta"),
        ("7.5", "turing"),
        ("8.0", "ampere"),
        ("8.6", "ampere"),
        ("8.9", "ada-lovelace"),
        ("9.0", "hopper"),
        ("10.0", "blackwell"),
        ("12.0", "blackwell"),
        ("13.0", "rubin"),
        ("11.0", "undefined"),
        (None, "undefined"),
    ],
)
def test_family(arch, family):
    assert label_node.family(arch) == family


def _args(*argv):
    return build_parser("label-node").parse_args(["label-node", *argv])


def test_dry_run_yaml_and_json(capsys):
    assert label_node.main(_args("--dry-run"), pynvml=fake_pynvml("t4-535-bytes")) == 0
    out = yaml.safe_load(capsys.readouterr().out)
    assert out["nvidia.com/cuda.driver-version.major"] == "535"  # stays a string
    assert (
        label_node.main(_args("--dry-run", "--format", "json"), pynvml=fake_pynvml("t4-535-bytes"))
        == 0
    )
    assert json.loads(capsys.readouterr().out) == out


def test_no_driver_is_a_clear_error(capsys):
    assert (
        label_node.main(_args("--dry-run", "--node", "gpu-3"), pynvml=fake_pynvml("no-driver")) == 1
    )
    err = capsys.readouterr().err
    assert "no NVIDIA driver is visible" in err and "node gpu-3" in err and "Traceback" not in err


def test_a_node_name_is_needed_to_patch(capsys, monkeypatch):
    monkeypatch.delenv("NODE_NAME", raising=False)
    assert label_node.main(_args(), pynvml=fake_pynvml("t4-535-bytes")) == 2
    assert "NODE_NAME" in capsys.readouterr().err


# ---- the patch, against a stand-in API server on loopback


@pytest.fixture
async def apiserver(tmp_path):
    seen = []
    status = {"code": 200}

    async def patch_node(request):
        body = await request.json()
        seen.append(
            (
                request.match_info["name"],
                request.headers["Content-Type"],
                body,
                request.headers.get("Authorization"),
            )
        )
        if status["code"] != 200:
            return web.json_response(
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "status": "Failure",
                    "code": status["code"],
                    "reason": "Forbidden" if status["code"] == 403 else "NotFound",
                    "message": "no",
                },
                status=status["code"],
            )
        return web.json_response(
            {
                "kind": "Node",
                "apiVersion": "v1",
                "metadata": {
                    "name": request.match_info["name"],
                    "labels": body["metadata"]["labels"],
                },
            }
        )

    app = web.Application()
    app.router.add_patch("/api/v1/nodes/{name}", patch_node)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "test",
                "clusters": [{"name": "test", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "test", "user": {"token": "secret-token"}}],
                "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
            }
        )
    )
    yield seen, status, str(kubeconfig)
    await runner.cleanup()


async def test_patches_its_node_with_a_merge_patch_of_labels_only(apiserver, capsys):
    seen, _status, kubeconfig = apiserver
    code = await label_node.run(
        _args("--node", "gpu-9", "--kubeconfig", kubeconfig), pynvml=fake_pynvml("a100-mig-570")
    )
    assert code == 0
    [(name, content_type, body, auth)] = seen
    assert name == "gpu-9"
    assert content_type.startswith("application/merge-patch+json")
    assert list(body) == ["metadata"] and list(body["metadata"]) == ["labels"]
    assert body["metadata"]["labels"]["nvidia.com/cuda.runtime-version.full"] == "12.8"
    assert auth == "Bearer secret-token"
    assert "set 19 labels on node gpu-9" in capsys.readouterr().out


@pytest.mark.parametrize(
    "code, words",
    [(403, "grant the service account 'patch' on nodes"), (404, "does not exist: check NODE_NAME")],
)
async def test_api_errors_say_what_to_fix(apiserver, capsys, code, words):
    _seen, status, kubeconfig = apiserver
    status["code"] = code
    rc = await label_node.run(
        _args("--node", "gpu-9", "--kubeconfig", kubeconfig), pynvml=fake_pynvml("t4-535-bytes")
    )
    assert rc == 1
    assert words in capsys.readouterr().err


async def test_unreachable_api_server(tmp_path, capsys):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "t",
                "clusters": [{"name": "t", "cluster": {"server": "http://127.0.0.1:9"}}],
                "users": [{"name": "t", "user": {"token": "x"}}],
                "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}],
            }
        )
    )
    rc = await label_node.run(
        _args("--node", "n", "--kubeconfig", str(kubeconfig)), pynvml=fake_pynvml("t4-535-bytes")
    )
    assert rc == 1
    assert "cannot reach the Kubernetes API server" in capsys.readouterr().err


async def test_no_credentials(tmp_path, capsys):
    rc = await label_node.run(
        _args("--node", "n", "--kubeconfig", str(tmp_path / "absent")),
        pynvml=fake_pynvml("t4-535-bytes"),
    )
    assert rc == 1
    assert "no Kubernetes credentials" in capsys.readouterr().err


# ---- the DaemonSet manifest


def test_the_daemonset_manifest_is_valid_and_wired_to_label_node():
    import pathlib

    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    path = pathlib.Path(__file__).resolve().parents[2] / "deploy" / "label-node-daemonset.yaml"
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    for doc in docs:
        kubernetes_validate.validate(doc, "1.30", strict=True)
    by_kind = {d["kind"]: d for d in docs}
    role = by_kind["ClusterRole"]["rules"][0]
    assert role["resources"] == ["nodes"] and "patch" in role["verbs"]
    pod = by_kind["DaemonSet"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == by_kind["ServiceAccount"]["metadata"]["name"]
    [container] = pod["containers"]
    assert container["args"][:2] == ["gpuspawner", "label-node"]
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert "nvidia.com/gpu" not in container.get("resources", {}).get("limits", {})
    args = build_parser("label-node").parse_args(container["args"][1:])
    assert args.interval > 0 and not args.dry_run
