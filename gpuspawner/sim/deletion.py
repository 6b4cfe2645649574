"""DeleteOptions and the garbage collector's finalizers: how a DELETE is asked and what it sets.
Design notes: docs/simulated-apiserver.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from .errors import ApiError, bad_request

__all__ = ["DeleteOptions", "ORPHAN", "FOREGROUND", "BACKGROUND", "FINALIZER_ORPHAN", "FINALIZER_FOREGROUND",
           "from_body", "from_query", "gc_finalizers", "namespace_gc_finalizers"]

ORPHAN, FOREGROUND, BACKGROUND = "Orphan", "Foreground", "Background"
# metav1.FinalizerOrphanDependents, metav1.FinalizerDeleteDependents
FINALIZER_ORPHAN = "orphan"
FINALIZER_FOREGROUND = "foregroundDeletion"


@dataclass(frozen=True)
class DeleteOptions:
    """meta/v1 DeleteOptions, the fields the registry reads (``dryRun`` is refused earlier)."""

    grace_period_seconds: int | None = None
    preconditions: Mapping[str, Any] | None = None
    orphan_dependents: bool | None = None
    propagation_policy: str | None = None

    def validate(self) -> None:
        """ValidateDeleteOptions: 422 for both legacy and new policy, or an unknown policy."""
        causes: list[tuple[str, str]] = []
        if self.orphan_dependents is not None and self.propagation_policy is not None:
            causes.append(("FieldValueInvalid", f'Invalid value: "{self.propagation_policy}": orphanDependents '
                                                "and deletionPropagation cannot be both set"))
        if self.propagation_policy is not None and self.propagation_policy not in (FOREGROUND, BACKGROUND, ORPHAN):
            causes.append(("FieldValueNotSupported", f'Unsupported value: "{self.propagation_policy}": supported '
                                                     'values: "Foreground", "Background", "Orphan", "nil"'))
        if not causes:
            return
        texts = [f"propagationPolicy: {m}" for _, m in causes]
        joined = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
        raise ApiError(422, "Invalid", f'DeleteOptions.meta.k8s.io "" is invalid: {joined}',
                       details={"group": "meta.k8s.io", "kind": "DeleteOptions",
                                "causes": [{"reason": r, "message": m, "field": "propagationPolicy"}
                                           for r, m in causes]})


def _int(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise bad_request(f"DeleteOptions.{name} must be an integer")
    try:
        return int(value)
    except ValueError:
        raise bad_request(f'strconv.ParseInt: parsing "{value}": invalid syntax ({name})') from None


def _bool(name: str, value: Any) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    # query parameters: Go strconv.ParseBool
    if value in ("1", "t", "T", "true", "TRUE", "True"):
        return True
    if value in ("0", "f", "F", "false", "FALSE", "False"):
        return False
    raise bad_request(f'strconv.ParseBool: parsing "{value}": invalid syntax ({name})')


def from_body(body: Mapping[str, Any]) -> DeleteOptions:
    """DeleteOptions from a decoded request body (JSON, YAML or protobuf)."""
    if not isinstance(body, Mapping):
        raise bad_request("the body of a DELETE must be a DeleteOptions object")
    if body.get("dryRun"):
        raise bad_request("dryRun is not supported by the simulated API server")
    pre = body.get("preconditions")
    if pre is not None and not isinstance(pre, Mapping):
        raise bad_request("DeleteOptions.preconditions must be an object")
    policy = body.get("propagationPolicy")
    if policy is not None and not isinstance(policy, str):
        raise bad_request("DeleteOptions.propagationPolicy must be a string")
    return DeleteOptions(_int("gracePeriodSeconds", body.get("gracePeriodSeconds")), pre,
                         _bool("orphanDependents", body.get("orphanDependents")), policy)


def from_query(query: Mapping[str, str]) -> DeleteOptions:
    """DeleteOptions from the query parameters of a DELETE without a body."""
    return DeleteOptions(_int("gracePeriodSeconds", query.get("gracePeriodSeconds") or None), None,
                         _bool("orphanDependents", query.get("orphanDependents")),
                         query.get("propagationPolicy") or None)


def _should_orphan(finalizers: list[str], opts: DeleteOptions) -> bool:
    if opts.orphan_dependents is not None:
        return opts.orphan_dependents
    if opts.propagation_policy is not None:
        return opts.propagation_policy == ORPHAN
    for f in finalizers:
        if f == FINALIZER_ORPHAN:
            return True
        if f == FINALIZER_FOREGROUND:
            return False
    return False  # DefaultGarbageCollectionPolicy: DeleteDependents


def _should_delete_dependents(finalizers: list[str], opts: DeleteOptions) -> bool:
    if opts.orphan_dependents is not None:
        return False
    if opts.propagation_policy is not None:
        return opts.propagation_policy == FOREGROUND
    for f in finalizers:
        if f == FINALIZER_FOREGROUND:
            return True
        if f == FINALIZER_ORPHAN:
            return False
    return False


def gc_finalizers(finalizers: list[str], opts: DeleteOptions) -> list[str] | None:
    """``deletionFinalizersForGarbageCollection``: the new finalizers, or None when unchanged."""
    new = [f for f in finalizers if f not in (FINALIZER_ORPHAN, FINALIZER_FOREGROUND)]
    if _should_orphan(finalizers, opts):
        new.append(FINALIZER_ORPHAN)
    if _should_delete_dependents(finalizers, opts):
        new.append(FINALIZER_FOREGROUND)
    return None if set(new) == set(finalizers) else new


def namespace_gc_finalizers(finalizers: list[str], opts: DeleteOptions) -> list[str] | None:
    """The namespace registry's rule on its first delete (``orphanDependents=false`` means foreground)."""
    def should(have: bool, legacy: bool | None, policy: str) -> bool:
        if opts.orphan_dependents is not None:
            return legacy  # type: ignore[return-value]
        if opts.propagation_policy is not None:
            return opts.propagation_policy == policy
        return have

    orphan = should(FINALIZER_ORPHAN in finalizers, opts.orphan_dependents, ORPHAN)
    foreground = should(FINALIZER_FOREGROUND in finalizers,
                        None if opts.orphan_dependents is None else not opts.orphan_dependents, FOREGROUND)
    new = [f for f in finalizers if f not in (FINALIZER_ORPHAN, FINALIZER_FOREGROUND)]
    new += [FINALIZER_ORPHAN] if orphan else []
    new += [FINALIZER_FOREGROUND] if foreground else []
    return None if set(new) == set(finalizers) else new
