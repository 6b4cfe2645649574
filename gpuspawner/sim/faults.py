"""Fault injection and request counters for the simulated API server.
Design notes: docs/simulated-apiserver.md.
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = ["AUDIT_VERBS", "FAULT_CODES", "Faults", "RequestCounters", "FailRule", "StallRule"]

AUDIT_VERBS = ("get", "list", "watch", "create", "update", "patch", "delete")
FAULT_CODES = (403, 410, 429, 500, 503)


def _matches(rule_verb: str | None, rule_resource: str | None, verb: str, resource: str) -> bool:
    if rule_verb is not None and rule_verb != verb:
        return False
    if rule_resource is not None and rule_resource != resource and not resource.startswith(rule_resource + "/"):
        return False
    return True


def _check_verb(verb: str | None) -> None:
    if verb is not None and verb not in AUDIT_VERBS:
        raise ValueError(f"unknown verb {verb!r}: use one of {', '.join(AUDIT_VERBS)}")


@dataclass
class FailRule:
    code: int
    remaining: int
    verb: str | None = None
    resource: str | None = None
    retry_after: int = 1

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "remaining": self.remaining, "verb": self.verb,
                "resource": self.resource, "retryAfter": self.retry_after}


@dataclass
class StallRule:
    seconds: float
    remaining: int | None  # None: every matching request until cleared
    verb: str | None = None
    resource: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"seconds": self.seconds, "remaining": self.remaining, "verb": self.verb,
                "resource": self.resource}


@dataclass
class Faults:
    """The faults the API server applies to the next matching requests."""

    clock: Callable[[], float] = time.monotonic
    fail_rules: list[FailRule] = field(default_factory=list)
    stall_rules: list[StallRule] = field(default_factory=list)
    _refuse_until: float | None = None  # monotonic; inf = until told otherwise
    _refuse_count: int = 0
    _close_watches: Callable[[], int] | None = None

    # -- configuring --
    def fail_next(self, count: int = 1, code: int = 500, *, verb: str | None = None,
                  resource: str | None = None, retry_after: int = 1) -> FailRule:
        """Answer the next ``count`` matching requests with ``code`` (403, 410, 429, 500, 503)."""
        if code not in FAULT_CODES:
            raise ValueError(f"code must be one of {FAULT_CODES}, not {code!r}")
        if count < 1:
            raise ValueError("count must be at least 1")
        _check_verb(verb)
        rule = FailRule(code, count, verb, resource, retry_after)
        self.fail_rules.append(rule)
        return rule

    def stall(self, seconds: float, *, verb: str | None = None, resource: str | None = None,
              count: int | None = None) -> StallRule:
        """Hold matching requests ``seconds`` before answering (the next ``count``, or all)."""
        if seconds < 0:
            raise ValueError("seconds must not be negative")
        if count is not None and count < 1:
            raise ValueError("count must be at least 1")
        _check_verb(verb)
        rule = StallRule(seconds, count, verb, resource)
        self.stall_rules.append(rule)
        return rule

    def refuse_connections(self, on: bool = True, *, seconds: float | None = None,
                           count: int | None = None) -> None:
        """Close new connections at accept: until ``refuse_connections(False)``,
        for ``seconds``, or for the next ``count`` connections."""
        self._refuse_count = 0
        self._refuse_until = None
        if not on:
            return
        if count is not None:
            if count < 1:
                raise ValueError("count must be at least 1")
            self._refuse_count = count
        else:
            self._refuse_until = float("inf") if seconds is None else self.clock() + seconds

    def close_watches(self) -> int:
        """End every open HTTP watch stream now; returns how many were closed."""
        return self._close_watches() if self._close_watches else 0

    def clear(self) -> None:
        self.fail_rules.clear()
        self.stall_rules.clear()
        self.refuse_connections(False)

    # -- consulted by the server --
    def refuse_this_connection(self) -> bool:
        if self._refuse_count > 0:
            self._refuse_count -= 1
            return True
        if self._refuse_until is not None:
            if self.clock() < self._refuse_until:
                return True
            self._refuse_until = None
        return False

    @property
    def refusing(self) -> bool:
        return self._refuse_count > 0 or (self._refuse_until is not None and self.clock() < self._refuse_until)

    def take_stall(self, verb: str, resource: str) -> float:
        total = 0.0
        for rule in list(self.stall_rules):
            if _matches(rule.verb, rule.resource, verb, resource):
                total = max(total, rule.seconds)
                if rule.remaining is not None:
                    rule.remaining -= 1
                    if rule.remaining <= 0:
                        self.stall_rules.remove(rule)
        return total

    def take_failure(self, verb: str, resource: str) -> FailRule | None:
        for rule in self.fail_rules:
            if _matches(rule.verb, rule.resource, verb, resource):
                rule.remaining -= 1
                if rule.remaining <= 0:
                    self.fail_rules.remove(rule)
                return rule
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "fail": [r.to_json() for r in self.fail_rules],
            "stall": [r.to_json() for r in self.stall_rules],
            "refusingConnections": self.refusing,
        }


class RequestCounters(collections.Counter):
    """Requests served, keyed by ``(verb, resource)`` with audit verbs."""

    def record(self, verb: str, resource: str) -> None:
        self[(verb, resource)] += 1

    def count(self, verb: str | None = None, resource: str | None = None) -> int:
        """The sum over the keys matching ``verb`` and ``resource`` (None: any)."""
        return sum(n for (v, r), n in self.items() if _matches(verb, resource, v, r))

    def reset(self) -> None:
        self.clear()

    def to_json(self) -> list[dict[str, Any]]:
        return [{"verb": v, "resource": r, "count": n} for (v, r), n in sorted(self.items())]
