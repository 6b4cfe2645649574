"""The culler's rules: which timeout applies to a server, and how users are told.  Pure.
Design notes: docs/culling.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuspawner.kube.times import format_duration, parse_duration

__all__ = ["AppliedRule", "CullRules", "Limits", "RulesError", "RulesFile", "describe", "load_rules", "rule_for",
           "rules_from_mapping"]

DEFAULT_IDLE_TIMEOUT = 3600.0
DEFAULT_NOISE_FLOOR = 0.01
_TOP_KEYS = {"idle_timeout", "max_age", "noise_floor", "exempt_groups", "profiles", "pools"}
_SCOPE_KEYS = {"idle_timeout", "max_age"}


class RulesError(ValueError):
    """A rules file or setting that cannot be used; the message says where and what to write."""


@dataclass(frozen=True)
class Limits:
    """A profile's or pool's own settings; None: not set here."""
    idle_timeout: float | None = None
    max_age: float | None = None  # 0: no maximum age


@dataclass(frozen=True)
class CullRules:
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT
    max_age: float = 0.0  # 0: no maximum age
    noise_floor: float = DEFAULT_NOISE_FLOOR
    exempt_groups: frozenset[str] = frozenset()
    profiles: Mapping[str, Limits] = field(default_factory=dict)
    pools: Mapping[str, Limits] = field(default_factory=dict)


@dataclass(frozen=True)
class AppliedRule:
    """What applies to one server, and where each part came from (for logs and users)."""
    idle_timeout: float
    max_age: float  # 0: none
    timeout_from: str  # "default", "profile gpu", "pool <id>"


def rule_for(rules: CullRules, profile: str | None, pool: str | None) -> AppliedRule:
    """The settings for a server of ``profile`` on ``pool``: pool, then profile, then defaults."""
    scopes = [(f"pool {pool}", rules.pools.get(pool or "")), (f"profile {profile}", rules.profiles.get(profile or ""))]
    timeout, timeout_from, max_age = rules.idle_timeout, "default", rules.max_age
    for name, limits in reversed(scopes):  # the more specific one last, so it wins
        if limits is None:
            continue
        if limits.idle_timeout is not None:
            timeout, timeout_from = limits.idle_timeout, name
        if limits.max_age is not None:
            max_age = limits.max_age
    return AppliedRule(timeout, max_age, timeout_from)


def describe(rule: AppliedRule) -> str:
    """The rule in a user's words, for the spawn page."""
    text = (f"This server is stopped after {format_duration(rule.idle_timeout)} in which neither the "
            "notebook nor its GPUs were used.")
    if rule.max_age:
        text += f" It is stopped {format_duration(rule.max_age)} after it started, even if busy."
    return text


# -- reading ------------------------------------------------------------------------------------

def _duration(where: str, value: Any, *, zero_ok: bool) -> float:
    if isinstance(value, bool) or value is None:
        raise RulesError(f"{where}: {value!r} is not a duration: write e.g. 90s, 5m, 2h")
    try:
        seconds = float(value) if isinstance(value, (int, float)) else parse_duration(str(value))
    except ValueError as e:
        raise RulesError(f"{where}: {e}") from None
    if seconds < 0 or (seconds == 0 and not zero_ok):
        raise RulesError(f"{where}: {value!r} must be longer than 0s")
    return seconds


def _limits(where: str, raw: Any) -> Limits:
    if not isinstance(raw, Mapping):
        raise RulesError(f"{where}: expected a mapping such as {{idle_timeout: 2h}}, got {raw!r}")
    unknown = set(raw) - _SCOPE_KEYS
    if unknown:
        raise RulesError(f"{where}: unknown setting(s) {', '.join(sorted(map(str, unknown)))}; "
                         f"known: {', '.join(sorted(_SCOPE_KEYS))}")
    return Limits(
        _duration(f"{where}.idle_timeout", raw["idle_timeout"], zero_ok=False) if "idle_timeout" in raw else None,
        _duration(f"{where}.max_age", raw["max_age"], zero_ok=True) if "max_age" in raw else None,
    )


def _scopes(where: str, raw: Any) -> dict[str, Limits]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise RulesError(f"{where}: expected a mapping of names to settings, got {raw!r}")
    return {str(name): _limits(f"{where}.{name}", value) for name, value in raw.items()}


def rules_from_mapping(doc: Any, where: str = "rules") -> CullRules:
    """Validate a parsed rules document (see the module's docstring)."""
    if doc is None:
        return CullRules()
    if not isinstance(doc, Mapping):
        raise RulesError(f"{where}: expected a mapping at the top, got {type(doc).__name__}")
    unknown = set(doc) - _TOP_KEYS
    if unknown:
        raise RulesError(f"{where}: unknown setting(s) {', '.join(sorted(map(str, unknown)))}; "
                         f"known: {', '.join(sorted(_TOP_KEYS))}")
    floor = doc.get("noise_floor", DEFAULT_NOISE_FLOOR)
    if isinstance(floor, bool) or not isinstance(floor, (int, float)) or not 0 <= floor < 1:
        raise RulesError(f"{where}.noise_floor: {floor!r} must be a fraction from 0 up to (not including) 1, "
                         "e.g. 0.01")
    groups = doc.get("exempt_groups") or []
    if isinstance(groups, str) or not isinstance(groups, list) or not all(isinstance(g, str) and g for g in groups):
        raise RulesError(f"{where}.exempt_groups: expected a list of group names, got {groups!r}")
    return CullRules(
        idle_timeout=_duration(f"{where}.idle_timeout", doc["idle_timeout"], zero_ok=False)
        if "idle_timeout" in doc else DEFAULT_IDLE_TIMEOUT,
        max_age=_duration(f"{where}.max_age", doc["max_age"], zero_ok=True) if doc.get("max_age") else 0.0,
        noise_floor=float(floor),
        exempt_groups=frozenset(groups),
        profiles=_scopes(f"{where}.profiles", doc.get("profiles")),
        pools=_scopes(f"{where}.pools", doc.get("pools")),
    )


def load_rules(path: str | Path) -> CullRules:
    """Read a rules file (YAML, of which JSON is a subset)."""
    import yaml

    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise RulesError(f"{p}: cannot read it: {e.strerror or e}") from None
    try:
        doc = yaml.safe_load(text) if p.suffix != ".json" else json.loads(text)
    except (yaml.YAMLError, ValueError) as e:
        raise RulesError(f"{p}: not valid {'JSON' if p.suffix == '.json' else 'YAML'}: "
                         f"{str(e).splitlines()[0]}") from None
    return rules_from_mapping(doc, str(p))


class RulesFile:
    """A rules file, read again only when its modification time (or size) changes: a reader may ask
    for its rules on every page view, and a file left as it is is never parsed twice."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._stamp: tuple[int, int] | None = None
        self._result: CullRules | RulesError | None = None

    def read(self) -> CullRules:
        """The file's rules; ``RulesError`` (saying what to fix) while it cannot be read or used."""
        try:
            st = self.path.stat()
        except OSError as e:
            self._stamp = None
            raise RulesError(f"{self.path}: cannot read it: {e.strerror or e}") from None
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp != self._stamp or self._result is None:
            try:
                self._result = load_rules(self.path)
            except RulesError as e:
                self._result = e
            self._stamp = stamp
        if isinstance(self._result, RulesError):
            raise RulesError(str(self._result)) from None
        return self._result
