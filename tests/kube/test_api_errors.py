"""A failed Kubernetes API call in plain words, and the hub's ClusterRole (gpuspawner.kube.api_errors)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gpuspawner.kube.api_errors import (
    CLUSTER_ROLE_NAME,
    CLUSTER_ROLE_RULES,
    DRA_CLUSTER_ROLE_RULES,
    DRA_GROUP,
    DRA_ROLE_NAME,
    DRA_ROLE_RULES,
    ApiStatus,
    dra_missing_rules_message,
    explain,
    missing_rules_message,
    rules_text,
    status_of,
)

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 403, "reason": "Forbidden",
             "message": 'nodes is forbidden: User "system:serviceaccount:jhub:hub" cannot list resource "nodes" '
                        'in API group "" at the cluster scope', "details": {"kind": "nodes"}}


@pytest.mark.parametrize(
    "code, body, expected",
    [
        (403, json.dumps(FORBIDDEN).encode(), ApiStatus(403, "Forbidden", FORBIDDEN["message"])),
        (403, FORBIDDEN, ApiStatus(403, "Forbidden", FORBIDDEN["message"])),  # a watch ERROR event's object
        (500, {"code": 410, "reason": "Expired", "message": "too old resource version: 1 (42)"},
         ApiStatus(410, "Expired", "too old resource version: 1 (42)")),  # the Status's own code wins
        (429, b'{"kind": "Status", "code": 429}', ApiStatus(429, "TooManyRequests", "")),
        (502, b"<html>\n<body>Bad Gateway</body></html>", ApiStatus(502, "", "<html>")),
        (503, b"", ApiStatus(503, "ServiceUnavailable", "")),
        (500, None, ApiStatus(500, "InternalError", "")),
    ],
    ids=["status-body", "watch-object", "object-code", "no-message", "proxy-page", "empty", "none"],
)
def test_status_of(code, body, expected):
    assert status_of(code, body) == expected


def test_text_is_the_message_or_the_code():
    assert ApiStatus(403, "Forbidden", "pods is forbidden").text == "pods is forbidden"
    assert ApiStatus(503, "ServiceUnavailable").text == "HTTP 503 ServiceUnavailable"
    assert ApiStatus(599).text == "HTTP 599"


@pytest.mark.parametrize(
    "status, words",
    [
        (ApiStatus(401, "Unauthorized", "Unauthorized"),
         "the Kubernetes API server does not accept the credentials (HTTP 401 Unauthorized): "),
        (ApiStatus(403, "Forbidden", "pods is forbidden"),
         "not allowed to do this (RBAC) (HTTP 403 Forbidden): pods is forbidden"),
        (ApiStatus(410, "Expired", "too old"), "too old; list again (HTTP 410 Expired): too old"),
        (ApiStatus(429, "TooManyRequests"), "overloaded and asks to retry later (HTTP 429 TooManyRequests)"),
        (ApiStatus(500, "InternalError", "etcdserver: request timed out"),
         "the Kubernetes API server failed (HTTP 500 InternalError): etcdserver: request timed out"),
        (ApiStatus(400, "BadRequest", "bad"), "the Kubernetes API server refused the request (HTTP 400 BadRequest): bad"),
    ],
    ids=["401", "403", "410", "429", "500", "400"],
)
def test_explain(status, words):
    assert words in explain(status)


def _rules(role: dict, group: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """A role's rules of one API group: (resource, verbs) per resource, in order."""
    return tuple((resource, tuple(r["verbs"])) for r in role["rules"] if r["apiGroups"] == [group]
                 for resource in r["resources"])


def test_the_rules_are_deploy_rbac_yaml():
    docs = list(yaml.safe_load_all((ROOT / "deploy" / "rbac.yaml").read_text(encoding="utf-8")))
    (role,) = [d for d in docs if d["kind"] == "ClusterRole"]
    assert role["metadata"]["name"] == CLUSTER_ROLE_NAME
    assert _rules(role, "") == CLUSTER_ROLE_RULES
    assert _rules(role, DRA_GROUP) == DRA_CLUSTER_ROLE_RULES
    assert all(r["apiGroups"] in ([""], [DRA_GROUP]) for r in role["rules"])
    (ns_role,) = [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == DRA_ROLE_NAME]
    assert ns_role["metadata"]["name"] == DRA_ROLE_NAME
    assert _rules(ns_role, DRA_GROUP) == DRA_ROLE_RULES and len(ns_role["rules"]) == 1


def test_rules_text():
    assert rules_text() == "nodes: get, list, watch; pods: list, watch"
    assert rules_text([("pods", ["list"])], sep=" ", verb_sep="/") == "pods list"


def test_dra_missing_rules_message_names_the_group_and_keeps_the_device_plugin_path():
    msg = dra_missing_rules_message(["resourceslices", "resourceclaims"])
    assert msg.startswith("forbidden: the hub cannot list/watch resourceslices and list/watch resourceclaims")
    assert '{apiGroups: ["resource.k8s.io"], resources: [resourceslices, resourceclaims], verbs: ["list", "watch"]}' in msg
    assert "device-plugin GPUs are counted as usual" in msg


def test_missing_rules_message_names_what_the_informers_need():
    msg = missing_rules_message(["nodes", "pods"])
    assert msg.startswith("forbidden: the hub cannot list/watch nodes and list/watch pods at the cluster scope")
    assert "[nodes: list, watch; pods: list, watch]" in msg and 'apiGroups: [""]' in msg
