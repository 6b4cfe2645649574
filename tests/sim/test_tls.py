"""The simulated API server over HTTPS (``SimCluster(tls=True)``): clients that trust the CA in
the kubeconfig it writes get through, as with a real API server's self-signed serving
certificate; a client that does not is refused at the TLS handshake."""

import asyncio
import os
import shutil
import ssl
import subprocess
from pathlib import Path

import aiohttp
import pytest
import yaml
from cryptography import x509
from kubernetes_asyncio import client, config

from gpuspawner.sim.cluster import SimCluster
from gpuspawner.sim.tls import self_signed
from tests.builders.sim import node

KUBECTL = shutil.which("kubectl") or ("/usr/bin/kubectl" if os.path.exists("/usr/bin/kubectl") else None)

pytestmark = pytest.mark.integration


def test_serving_certificate_names_the_host_and_is_signed_by_its_ca():
    cert = self_signed("127.0.0.1")
    ca = x509.load_pem_x509_certificate(cert.ca_pem)
    server = x509.load_pem_x509_certificate(cert.cert_pem)
    assert ca.subject.rfc4514_string().startswith("CN=127.0.0.1-ca@")  # client-go's naming
    assert server.issuer == ca.subject
    sans = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert sans.get_values_for_type(x509.DNSName) == ["localhost"]
    server.verify_directly_issued_by(ca)  # raises when the signature does not check out


def _cluster() -> SimCluster:
    return SimCluster(manifests=[node("gpu-1", gpus=4)], run_pods=False, tls=True)


async def test_kubernetes_client_trusts_the_ca_in_the_kubeconfig(tmp_path: Path):
    cluster = _cluster()
    url = await cluster.start()
    try:
        assert url.startswith("https://127.0.0.1:")
        kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
        cfg = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]
        assert cfg["server"] == url and cfg["certificate-authority-data"]
        conf = client.Configuration()
        await config.load_kube_config(config_file=str(kubeconfig), client_configuration=conf)
        async with client.ApiClient(conf) as api:
            nodes = await client.CoreV1Api(api).list_node()
        assert [n.metadata.name for n in nodes.items] == ["gpu-1"]
    finally:
        await cluster.stop()


async def test_a_client_without_the_ca_is_refused_at_the_handshake():
    cluster = _cluster()
    url = await cluster.start()
    try:
        async with aiohttp.ClientSession() as session:  # the system's trust store only
            with pytest.raises(aiohttp.ClientConnectorCertificateError) as e:
                await session.get(f"{url}/api/v1/nodes")
        assert isinstance(e.value.certificate_error, ssl.SSLCertVerificationError)
    finally:
        await cluster.stop()


@pytest.mark.kubectl
@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed on this machine: run scripts/setup.sh")
async def test_kubectl_verifies_the_server_with_the_kubeconfig_ca(tmp_path: Path):
    cluster = _cluster()
    await cluster.start()
    try:
        kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
        out = await asyncio.to_thread(
            subprocess.run, [KUBECTL, "--kubeconfig", str(kubeconfig), "get", "nodes", "-o", "name"],
            capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == ["node/gpu-1"]
    finally:
        await cluster.stop()
