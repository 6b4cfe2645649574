"""Runs Kueue's controller manager (built by scripts/kueue-build.sh) against a Kubernetes API server.

Writes Kueue's Configuration, a CA and a serving certificate for 127.0.0.1, applies Kueue's CRDs, its
webhooks (URL webhooks with the CA as caBundle) and its visibility APIService, then starts the manager.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import ipaddress
import json
import os
import re
import shlex
import shutil
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import yaml

from .processes import stop_process

REPO = Path(__file__).resolve().parent.parent
BUILD_SCRIPT = REPO / "scripts" / "kueue-build.sh"
NAMESPACE = "kueue-system"
VISIBILITY_SERVICE = "kueue-visibility-server"

# Kueue v0.17 reads the metrics and visibility certificates from fixed paths when its internal cert
# management is off (apis/config/v1beta2 InternalCertManagement): /etc/kueue/metrics/certs, and the
# visibility server's directory, which kueue-build.sh links to /etc/kueue/visibility. The manager runs
# in a private mount namespace where /etc is an overlay holding this instance's certificates, so
# nothing is written to the host's /etc and instances do not share files.
ETC_DIRS = ("kueue/metrics/certs", "kueue/visibility")

# the webhooks Kueue serves with only the pod integration: its own kinds and plain pods (the other
# entries of its manifests.yaml are for integrations that are off, and would fail their kinds' writes)
SERVED_PATH_PARTS = ("kueue-x-k8s-io", "--v1-pod")
# CRDs Kueue converts between v1beta1 and v1beta2 (config/components/crd/kustomization.yaml)
CONVERTED_CRDS = ("localqueues", "clusterqueues", "cohorts", "workloads", "multikueueclusters")
SYSTEM_NAMESPACES = ["kube-system", NAMESPACE]


class KueueError(RuntimeError):
    """Kueue could not be built, set up or started; the message says what to do."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build() -> Path:
    """The Kueue binary, built (or found in the cache) by scripts/kueue-build.sh."""
    try:
        out = subprocess.run(["bash", str(BUILD_SCRIPT)], check=True, capture_output=True, text=True)
    except subprocess.CalledProcessError as e:
        raise KueueError(f"scripts/kueue-build.sh failed ({e.returncode}):\n{e.stderr[-4000:]}") from None
    path = Path(out.stdout.strip().splitlines()[-1])
    if not path.is_file():
        raise KueueError(f"scripts/kueue-build.sh printed {path}, which is not a file")
    return path


@dataclass
class Certs:
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes


def make_certs(dns_names: list[str]) -> Certs:
    """A CA and a certificate it signs for 127.0.0.1, localhost and ``dns_names``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kueue test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                     key_encipherment=False, data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    sans = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
    sans += [x509.DNSName(n) for n in dns_names]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kueue")]))
        .issuer_name(ca_name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    return Certs(
        ca_pem=ca.public_bytes(pem),
        cert_pem=cert.public_bytes(pem),
        key_pem=key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
    )


def configuration(*, webhook_port: int, cert_dir: Path, health_port: int, visibility_port: int,
                  wait_for_pods_ready: str | None, managed_namespaces: dict | None) -> dict:
    """Kueue's Configuration (config.kueue.x-k8s.io/v1beta2) for one manager on loopback."""
    config: dict = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "manageJobsWithoutQueueName": False,
        "managedJobsNamespaceSelector": managed_namespaces or {
            "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": SYSTEM_NAMESPACES}]
        },
        "internalCertManagement": {"enable": False},
        "leaderElection": {"leaderElect": False},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},  # off: nothing scrapes a test's Kueue
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "visibilityServer": {"bindPort": visibility_port, "bindAddress": "127.0.0.1"},
        "integrations": {"frameworks": ["pod"]},
        "clientConnection": {"qps": 200, "burst": 400},
    }
    if wait_for_pods_ready:
        config["waitForPodsReady"] = {"timeout": wait_for_pods_ready, "blockAdmission": False}
    return config


def webhook_configurations(manifests: str, base_url: str, ca_bundle: str) -> list[dict]:
    """Kueue's webhook configurations (config/components/webhook/manifests.yaml) as URL webhooks on
    ``base_url``, only the ones it serves with the pod integration, pods of the system namespaces left out
    (as Kueue's kustomization does)."""
    out = []
    for doc in yaml.safe_load_all(manifests):
        if not doc:
            continue
        doc["metadata"] = {"name": "kueue-" + doc["metadata"]["name"]}
        kept = []
        for hook in doc.get("webhooks") or []:
            path = hook["clientConfig"]["service"]["path"]
            if not any(p in path for p in SERVED_PATH_PARTS):
                continue
            hook["clientConfig"] = {"url": base_url + path, "caBundle": ca_bundle}
            if path.endswith("--v1-pod"):
                hook["namespaceSelector"] = {"matchExpressions": [
                    {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": SYSTEM_NAMESPACES}]}
            kept.append(hook)
        doc["webhooks"] = kept
        out.append(doc)
    return out


def crds(crd_dir: Path, base_url: str, ca_bundle: str) -> list[dict]:
    """Kueue's CRDs, with the conversion webhook its kustomization adds pointed at ``base_url``."""
    out = []
    for path in sorted(crd_dir.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        if crd["spec"]["names"]["plural"] in CONVERTED_CRDS:
            crd["spec"]["conversion"] = {
                "strategy": "Webhook",
                "webhook": {"clientConfig": {"url": base_url + "/convert", "caBundle": ca_bundle},
                            "conversionReviewVersions": ["v1"]},
            }
        out.append(crd)
    return out


def visibility_objects(port: int, ca_bundle: str) -> list[dict]:
    """The visibility API's APIService, routed without kube-proxy: a Service of type ExternalName
    naming 127.0.0.1 (the aggregator dials it at the APIService's port)."""
    service = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": VISIBILITY_SERVICE, "namespace": NAMESPACE},
        "spec": {"type": "ExternalName", "externalName": "127.0.0.1", "ports": [{"name": "https", "port": port}]},
    }
    services = [service]
    for version in ("v1beta2", "v1beta1"):
        services.append({
            "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": f"{version}.visibility.kueue.x-k8s.io"},
            "spec": {
                "group": "visibility.kueue.x-k8s.io", "version": version,
                "groupPriorityMinimum": 100, "versionPriority": 100 if version == "v1beta2" else 90,
                "service": {"name": VISIBILITY_SERVICE, "namespace": NAMESPACE, "port": port},
                "caBundle": ca_bundle,
            },
        })
    return services


def namespace_command(workdir: Path, argv: list[str]) -> list[str]:
    """``argv`` run in a private mount namespace whose /etc is an overlay holding this instance's
    metrics and visibility certificates (see ETC_DIRS)."""
    layer = workdir / "etc-layer"
    script = (
        "set -e; "
        f"mount -t tmpfs tmpfs {shlex.quote(str(layer))}; "
        f"mkdir -p {shlex.quote(str(layer / 'up'))} {shlex.quote(str(layer / 'work'))}; "
        + "".join(
            f"mkdir -p {shlex.quote(str(layer / 'up' / d))}; "
            f"cp {shlex.quote(str(workdir / 'certs' / 'tls.crt'))} {shlex.quote(str(workdir / 'certs' / 'tls.key'))} "
            f"{shlex.quote(str(layer / 'up' / d))}/; "
            for d in ETC_DIRS
        )
        + f"mount -t overlay overlay -o lowerdir=/etc,upperdir={shlex.quote(str(layer / 'up'))},"
        f"workdir={shlex.quote(str(layer / 'work'))} /etc; "
        f"exec {' '.join(shlex.quote(a) for a in argv)}"
    )
    unshare = ["unshare", "--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        unshare[1:1] = ["--user", "--map-root-user"]
    return unshare + ["sh", "-c", script]


@dataclass
class Kueue:
    """One Kueue manager for the cluster of ``kubeconfig``, its files under ``workdir``."""

    kubeconfig: Path
    workdir: Path
    binary: Path | None = None
    wait_for_pods_ready: str | None = "5m"
    managed_namespaces: dict | None = None
    webhook_port: int = field(default_factory=free_port)
    visibility_port: int = field(default_factory=free_port)
    health_port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None
    ca_pem: bytes = b""
    share: Path | None = None  # the build's directory: Kueue's CRDs and webhook manifests
    wrap: Callable[[list[str]], list[str]] | None = None  # the command run instead (e.g. under guard.py)

    @property
    def log_path(self) -> Path:
        return self.workdir / "kueue.log"

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(["kubectl", f"--kubeconfig={self.kubeconfig}", *args], input=input,
                              capture_output=True, text=True, check=check, timeout=120)

    def apply_file(self, path: Path) -> None:
        """``kubectl apply`` of a YAML file of objects (an admin's queues, flavors and priorities)."""
        self.apply([o for o in yaml.safe_load_all(Path(path).read_text()) if o])

    def apply(self, objects: list[dict]) -> None:
        body = "\n".join(json.dumps(o) for o in objects)
        try:
            self.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=gpuspawner-testcluster",
                         "-f", "-", input=body)
        except subprocess.CalledProcessError as e:
            raise KueueError(f"kubectl apply of Kueue's objects failed: {e.stderr.strip()}") from None

    def check_server_version(self) -> None:
        """Kueue's manager exits when the API server's version is not semantic ("Unable to setup
        server version fetcher"): a control plane built without its version stamped reports
        v0.0.0-master+$Format:%H$."""
        r = self.kubectl("version", "-o", "json", check=False)
        try:
            version = json.loads(r.stdout)["serverVersion"]["gitVersion"]
        except (ValueError, KeyError, TypeError):
            raise KueueError(f"cannot read the API server's version: {r.stderr.strip() or r.stdout[:200]}") from None
        if not re.fullmatch(r"v\d+\.\d+\.\d+([-+][0-9A-Za-z.+-]*)?", version):
            raise KueueError(
                f"the API server reports version {version!r}, which Kueue cannot parse (its manager would exit): "
                "build the control plane with its version stamped, e.g. -ldflags "
                "'-X k8s.io/component-base/version.gitVersion=v1.37.2'")

    def start(self, timeout: float = 120.0) -> Kueue:
        self.check_server_version()
        binary = self.binary or build()
        share = binary.parent  # kueue-build.sh puts the module's crd/ and webhook/ next to the binary
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "etc-layer").mkdir(exist_ok=True)
        certs_dir = self.workdir / "certs"
        certs_dir.mkdir(exist_ok=True)
        certs = make_certs([f"{VISIBILITY_SERVICE}.{NAMESPACE}.svc", f"{VISIBILITY_SERVICE}.{NAMESPACE}.svc.cluster.local"])
        (certs_dir / "ca.crt").write_bytes(certs.ca_pem)
        (certs_dir / "tls.crt").write_bytes(certs.cert_pem)
        (certs_dir / "tls.key").write_bytes(certs.key_pem)
        self.ca_pem = certs.ca_pem
        ca_bundle = base64.b64encode(certs.ca_pem).decode()
        base_url = f"https://127.0.0.1:{self.webhook_port}"
        config = configuration(webhook_port=self.webhook_port, cert_dir=certs_dir, health_port=self.health_port,
                               visibility_port=self.visibility_port, wait_for_pods_ready=self.wait_for_pods_ready,
                               managed_namespaces=self.managed_namespaces)
        config_path = self.workdir / "config.yaml"
        config_path.write_text(yaml.safe_dump(config))

        self.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}])
        definitions = crds(share / "crd", base_url, ca_bundle)
        self.apply(definitions)
        try:
            self.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                         *(f"crd/{d['metadata']['name']}" for d in definitions))
        except subprocess.CalledProcessError as e:
            raise KueueError(f"Kueue's CRDs did not become Established: {e.stderr.strip()}") from None
        self.apply(visibility_objects(self.visibility_port, ca_bundle))

        argv = [str(binary), f"--config={config_path}", f"--kubeconfig={self.kubeconfig}",
                f"--visibility-server-port={self.visibility_port}", "--zap-log-level=info"]
        log = open(self.log_path, "ab")
        command = namespace_command(self.workdir, argv)
        self.process = subprocess.Popen(self.wrap(command) if self.wrap else command, stdout=log,
                                        stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        # the webhooks go in once the manager serves them: a pod create with failurePolicy Fail
        # would be refused while it starts
        self._wait(lambda: self._get(f"http://127.0.0.1:{self.health_port}/readyz") == 200, timeout,
                   "Kueue's manager did not become ready")
        self.share = share
        self.apply(self.webhooks())
        self._wait(self._visibility_available, timeout, "the visibility API (v1beta2.visibility.kueue.x-k8s.io) "
                   "did not become Available: the API server needs the --requestheader-* and --proxy-client-* flags")
        return self

    def webhooks(self) -> list[dict]:
        """Kueue's webhook configurations for this manager (as ``start`` applies them)."""
        return webhook_configurations((self.share / "webhook" / "manifests.yaml").read_text(),
                                      f"https://127.0.0.1:{self.webhook_port}",
                                      base64.b64encode(self.ca_pem).decode())

    def _visibility_available(self) -> bool:
        r = self.kubectl("get", "apiservice", "v1beta2.visibility.kueue.x-k8s.io", "-o", "json", check=False)
        if r.returncode != 0:
            return False
        conds = json.loads(r.stdout).get("status", {}).get("conditions", [])
        return any(c.get("type") == "Available" and c.get("status") == "True" for c in conds)

    @staticmethod
    def _get(url: str) -> int | None:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                return r.status
        except (urllib.error.URLError, OSError, ssl.SSLError):
            return None

    def _wait(self, ready, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise KueueError(f"Kueue's manager exited ({self.process.returncode}); its log:\n{self.tail()}")
            if ready():
                return
            time.sleep(0.3)
        raise KueueError(f"{what} within {timeout:.0f} s; Kueue's log:\n{self.tail()}")

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """Stop the manager and take its webhooks out (a pod create would otherwise be refused), and
        its visibility APIServices (an unavailable aggregated API stops the namespace controller:
        no namespace deleted afterwards would go)."""
        self.kubectl("delete", "mutatingwebhookconfiguration", "kueue-mutating-webhook-configuration",
                     "--ignore-not-found", check=False)
        self.kubectl("delete", "validatingwebhookconfiguration", "kueue-validating-webhook-configuration",
                     "--ignore-not-found", check=False)
        self.kubectl("delete", "apiservice", *(f"{v}.visibility.kueue.x-k8s.io" for v in ("v1beta2", "v1beta1")),
                     "--ignore-not-found", check=False)
        p, self.process = self.process, None
        stop_process(p, 10, group=True, kill_wait=None)
        shutil.rmtree(self.workdir / "etc-layer", ignore_errors=True)

    def __enter__(self) -> Kueue:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testcluster.kueue", description=__doc__)
    parser.add_argument("--kubeconfig", required=True, type=Path, help="an admin kubeconfig of the cluster")
    parser.add_argument("--workdir", required=True, type=Path, help="where Kueue's config, certificates and log go")
    parser.add_argument("--wait-for-pods-ready", default="5m", help="waitForPodsReady.timeout ('' for off)")
    args = parser.parse_args(argv)
    kueue = Kueue(args.kubeconfig, args.workdir, wait_for_pods_ready=args.wait_for_pods_ready or None)
    try:
        kueue.start()
    except KueueError as e:
        print(f"testcluster.kueue: {e}", file=sys.stderr)
        kueue.stop()
        return 1
    print(f"Kueue is running (webhooks on 127.0.0.1:{kueue.webhook_port}, visibility API on "
          f"127.0.0.1:{kueue.visibility_port}); log: {kueue.log_path}. Ctrl-C stops it.", flush=True)
    try:
        kueue.process.wait()
    except KeyboardInterrupt:
        pass
    finally:
        kueue.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
