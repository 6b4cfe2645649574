"""The API server's errors, as ``kind: Status`` bodies with the real reasons and wording.

Source: ``k8s.io/apimachinery/pkg/api/errors/errors.go``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ApiError", "not_found", "already_exists", "conflict", "bad_request", "invalid", "expired",
           "MODIFIED", "LIST_EXPIRED", "CONTINUE_EXPIRED"]


# --- errors ---------------------------------------------------------------------


class ApiError(Exception):
    """A failure the real API server reports as a ``kind: Status`` body."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        retry_after: int | None = None,
        continue_token: str | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.retry_after = retry_after
        self.continue_token = continue_token

    def status(self) -> dict[str, Any]:
        meta: dict[str, Any] = {}
        if self.continue_token:
            meta["continue"] = self.continue_token
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": meta,
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
        }
        details = dict(self.details or {})
        if self.retry_after is not None:
            details["retryAfterSeconds"] = self.retry_after
        if details:
            body["details"] = details
        body["code"] = self.code
        return body

    def __repr__(self) -> str:
        return f"ApiError({self.code}, {self.reason!r}, {self.message!r})"


def _qualified(plural: str, group: str) -> str:
    # schema.GroupResource.String(): "resourceclaims.resource.k8s.io", plain "pods" for core
    return f"{plural}.{group}" if group else plural


def _details(plural: str, name: str, group: str) -> dict[str, Any]:
    return {"name": name, **({"group": group} if group else {}), "kind": plural}


def not_found(plural: str, name: str, group: str = "") -> ApiError:
    return ApiError(404, "NotFound", f'{_qualified(plural, group)} "{name}" not found',
                    details=_details(plural, name, group))


def already_exists(plural: str, name: str, group: str = "") -> ApiError:
    return ApiError(409, "AlreadyExists", f'{_qualified(plural, group)} "{name}" already exists',
                    details=_details(plural, name, group))


def conflict(plural: str, name: str, why: str, group: str = "") -> ApiError:
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {_qualified(plural, group)} "{name}": {why}',
                    details=_details(plural, name, group))


MODIFIED = "the object has been modified; please apply your changes to the latest version and try again"


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def invalid(kind: str, name: str, causes: list[tuple[str, str, str]], group: str = "") -> ApiError:
    """422 Invalid: ``causes`` are (reason, field, message) as field.Error renders them; the
    message names the kind with its group (``errors.NewInvalid``: ``GroupKind.String()``,
    ``StorageClass.storage.k8s.io "s" is invalid: ...``)."""
    texts = [f"{f}: {m}" for _, f, m in causes]
    joined = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    details: dict[str, Any] = {}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    details["kind"] = kind
    details["causes"] = [{"reason": r, "message": m, "field": f} for r, f, m in causes]
    return ApiError(422, "Invalid", f'{_qualified(kind, group)} "{name}" is invalid: {joined}', details=details)


def expired(message: str, continue_token: str | None = None) -> ApiError:
    return ApiError(410, "Expired", message, continue_token=continue_token)


# k8s.io/apiserver/pkg/storage/etcd3/store.go
LIST_EXPIRED = "The resourceVersion for the provided list is too old."
CONTINUE_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter, or use the continue token in this "
    "response to retrieve the remainder of the results. Continuing with the provided token "
    "results in an inconsistent list - objects that were created, modified, or deleted between "
    "the time the first chunk was returned and now may show up in the list."
)

