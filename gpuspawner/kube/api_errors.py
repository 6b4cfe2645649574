"""A failed Kubernetes API call in plain words, and the cluster-wide rights the hub needs.
Pure, stdlib only.  Design notes: docs/architecture.md.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ApiStatus",
    "REASONS",
    "status_of",
    "explain",
    "meaning",
    "CLUSTER_ROLE_NAME",
    "CLUSTER_ROLE_RULES",
    "INFORMER_VERBS",
    "rules_text",
    "missing_rules_message",
    "DRA_GROUP",
    "DRA_CLUSTER_ROLE_RULES",
    "DRA_ROLE_NAME",
    "DRA_ROLE_RULES",
    "dra_missing_rules_message",
]

#: metav1.StatusReason for each HTTP code the API server sends (the first, when several share one)
REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Gone",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}

_MEANING = {
    401: "the Kubernetes API server does not accept the credentials",
    403: "the credentials are not allowed to do this (RBAC)",
    404: "the Kubernetes API server has no such object or API",
    409: "the object was changed or created by someone else meanwhile",
    410: "the resourceVersion asked for is too old; list again",
    422: "the Kubernetes API server refused the object as invalid",
    429: "the Kubernetes API server is overloaded and asks to retry later",
}

_MAX_MESSAGE = 200  # of a body that is not a Status: a proxy's error page, say


@dataclass(frozen=True, slots=True)
class ApiStatus:
    """What a failed call answered: the HTTP code, the ``StatusReason`` and the server's message."""

    code: int
    reason: str = ""
    message: str = ""

    @property
    def text(self) -> str:
        """The server's message, or the code and reason when it sent none."""
        return self.message or f"HTTP {self.code}" + (f" {self.reason}" if self.reason else "")


def status_of(code: int, body: bytes | str | Mapping[str, Any] | None) -> ApiStatus:
    """The ``Status`` of a failed call (its raw body, or a watch ``ERROR`` event's object).

    A body that is not a Status (a proxy's page) gives its first line as the message; a
    missing reason is the one the code stands for."""
    doc: Any = body
    if isinstance(body, (bytes, str)):
        try:
            doc = json.loads(body)
        except ValueError:
            doc = None
    if isinstance(doc, Mapping):
        if isinstance(doc.get("code"), int) and not isinstance(doc.get("code"), bool):
            code = doc["code"]
        reason = doc.get("reason") if isinstance(doc.get("reason"), str) else ""
        message = doc.get("message") if isinstance(doc.get("message"), str) else ""
        return ApiStatus(code, reason or REASONS.get(code, ""), message)
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body if isinstance(body, str) else ""
    lines = text.strip().splitlines()
    return ApiStatus(code, REASONS.get(code, ""), lines[0][:_MAX_MESSAGE] if lines else "")


def meaning(code: int) -> str:
    """What an HTTP error code from the API server means, in a user's words: a code of its own
    (401, 403, 404, 409, 410, 422, 429), else the server failed (5xx) or refused the request."""
    known = _MEANING.get(code)
    if known is not None:
        return known
    return "the Kubernetes API server failed" if code >= 500 else "the Kubernetes API server refused the request"


def explain(status: ApiStatus) -> str:
    """The failure in a user's words, with the code, reason and the server's own message:
    ``the credentials are not allowed to do this (RBAC) (HTTP 403 Forbidden): pods is forbidden: ...``."""
    head = f"HTTP {status.code} {status.reason}".strip()
    said = meaning(status.code)
    return f"{said} ({head}): {status.message}" if status.message else f"{said} ({head})"


# ---------------------------------------------------------------------------
# the hub's ClusterRole
# ---------------------------------------------------------------------------

#: deploy/rbac.yaml's ClusterRole
CLUSTER_ROLE_NAME = "gpuspawner-capacity-reader"
#: its rules (apiGroups [""], the cluster scope): resource -> verbs
CLUSTER_ROLE_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("nodes", ("get", "list", "watch")),
    ("pods", ("list", "watch")),
)
#: what the capacity cache's informers do with each resource
INFORMER_VERBS = ("list", "watch")

#: the API group of Dynamic Resource Allocation (``resource.k8s.io/v1``)
DRA_GROUP = "resource.k8s.io"
#: the ClusterRole's rules for DRA (apiGroups [resource.k8s.io], the cluster scope), which the
#: capacity cache needs to count DRA GPUs: resource -> verbs
DRA_CLUSTER_ROLE_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("deviceclasses", ("get", "list", "watch")),
    ("resourceslices", ("get", "list", "watch")),
    ("resourceclaims", ("get", "list", "watch")),
)
#: deploy/rbac.yaml's Role in the hub's namespace, for the claim templates of DRA spawns
DRA_ROLE_NAME = "gpuspawner-claim-templates"
#: its rules (apiGroups [resource.k8s.io]): resource -> verbs
DRA_ROLE_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("resourceclaimtemplates", ("get", "list", "create", "delete")),
)


def rules_text(rules: Iterable[tuple[str, Iterable[str]]] = CLUSTER_ROLE_RULES, sep: str = ": ",
               verb_sep: str = ", ") -> str:
    """``nodes: get, list, watch; pods: list, watch``."""
    return "; ".join(f"{resource}{sep}{verb_sep.join(verbs)}" for resource, verbs in rules)


def missing_rules_message(kinds: list[str]) -> str:
    """The capacity cache's 403 explanation: which ClusterRole rules the hub lacks to list and
    watch ``kinds`` (``nodes``, ``pods``)."""
    rules = rules_text((k, INFORMER_VERBS) for k in kinds)
    return (
        f"forbidden: the hub cannot {' and '.join('list/watch ' + k for k in kinds)} at the cluster scope, "
        f"so live GPU capacity is unknown. Bind the hub's service account to a ClusterRole with the rules "
        f'[{rules}] (apiGroups: [""]); the Zero to JupyterHub hub Role is namespaced and does not grant them.'
    )


def dra_missing_rules_message(kinds: list[str]) -> str:
    """The capacity cache's 403 explanation for its DRA informers: which ClusterRole rules the
    hub lacks to list and watch ``kinds`` (``resourceslices``, ``resourceclaims``, ``deviceclasses``)."""
    verbs = ", ".join(f'"{v}"' for v in INFORMER_VERBS)
    return (
        f"forbidden: the hub cannot {' and '.join('list/watch ' + k for k in kinds)} at the cluster scope, "
        "so GPUs handed out through Dynamic Resource Allocation are not offered (device-plugin GPUs are "
        f'counted as usual). Add the rule {{apiGroups: ["{DRA_GROUP}"], resources: [{", ".join(kinds)}], '
        f"verbs: [{verbs}]}} to the hub's ClusterRole (deploy/rbac.yaml)."
    )
