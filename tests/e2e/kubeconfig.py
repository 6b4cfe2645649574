"""HTTP to a cluster as the user of a kubeconfig that ``gpuspawner demo`` or ``gpuspawner sim`` wrote
(``--kubeconfig PATH``: the admin's client certificate and the cluster CA, embedded)."""

from __future__ import annotations

import base64
import pathlib

import requests
import yaml


def kubeconfig_session(path: str | pathlib.Path) -> tuple[str, requests.Session]:
    """(the API server's URL, a session as the current context's user, trusting its cluster's CA).
    The certificates are written beside the kubeconfig, readable by its owner only."""
    path = pathlib.Path(path)
    doc = yaml.safe_load(path.read_text())
    context = next(c["context"] for c in doc["contexts"] if c["name"] == doc["current-context"])
    cluster = next(c["cluster"] for c in doc["clusters"] if c["name"] == context["cluster"])
    user = next(u["user"] for u in doc["users"] if u["name"] == context["user"])
    pki = path.parent / f"{path.name}.pki"
    pki.mkdir(mode=0o700, exist_ok=True)
    files = {}
    for key, name in (("certificate-authority-data", "ca.crt"), ("client-certificate-data", "client.crt"),
                      ("client-key-data", "client.key")):
        data = cluster.get(key) if key.startswith("certificate-authority") else user.get(key)
        assert data, f"{path}: no {key}: the tests reach the cluster as its admin (a client certificate)"
        files[name] = pki / name
        files[name].write_bytes(base64.b64decode(data))
    s = requests.Session()
    s.trust_env = False  # else $REQUESTS_CA_BUNDLE would replace the cluster CA
    s.cert = (str(files["client.crt"]), str(files["client.key"]))
    s.verify = str(files["ca.crt"])
    return cluster["server"], s
