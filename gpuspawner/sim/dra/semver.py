"""Semantic versions as DRA's CEL ``semver()`` and ResourceSlice ``version`` attributes read them.  Pure.
Design notes: docs/simulated-cluster.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import total_ordering

__all__ = ["Version", "SemverError", "parse", "normalize"]


class SemverError(ValueError):
    """Not a semantic version; the message is blang/semver's."""


def _numeric(part: str, what: str, text: str) -> int:
    if not part or not part.isdigit() or not part.isascii():
        raise SemverError(f"Invalid character(s) found in {what} number {part!r}")
    if len(part) > 1 and part[0] == "0":
        raise SemverError(f"{what.capitalize()} number must not contain leading zeroes {part!r}")
    return int(part)


def _identifiers(text: str, what: str, numeric_rules: bool) -> tuple[str, ...]:
    parts = tuple(text.split("."))
    for p in parts:
        if not p:
            raise SemverError(f"{what} is empty")
        if not all(c.isascii() and (c.isalnum() or c == "-") for c in p):
            raise SemverError(f"Invalid character(s) found in {what.lower()} {p!r}")
        if numeric_rules and p.isdigit() and len(p) > 1 and p[0] == "0":
            raise SemverError(f"{what} number must not contain leading zeroes {p!r}")
    return parts


@total_ordering
@dataclass(frozen=True)
class Version:
    """A parsed version; ``==`` and ordering follow semver precedence (build ignored)."""

    major: int
    minor: int
    patch: int
    pre: tuple[str, ...] = ()
    build: tuple[str, ...] = ()

    def _key(self) -> tuple:
        # a release ranks above its prereleases; numeric identifiers below alphanumeric ones
        pre = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in self.pre)
        return (self.major, self.minor, self.patch, 0 if self.pre else 1, pre)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._key() == other._key()

    def __lt__(self, other: "Version") -> bool:
        return self._key() < other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def compare(self, other: "Version") -> int:
        """-1, 0 or 1, as ``Version.Compare``."""
        a, b = self._key(), other._key()
        return (a > b) - (a < b)

    def __str__(self) -> str:
        s = f"{self.major}.{self.minor}.{self.patch}"
        if self.pre:
            s += "-" + ".".join(self.pre)
        if self.build:
            s += "+" + ".".join(self.build)
        return s


def parse(text: str) -> Version:
    """``semver.Parse``: strict ``MAJOR.MINOR.PATCH[-PRE][+BUILD]``."""
    if not isinstance(text, str) or not text:
        raise SemverError("Version string empty")
    rest, _, build = text.partition("+")
    core, dash, pre = rest.partition("-")
    parts = core.split(".")
    if len(parts) != 3:
        raise SemverError("No Major.Minor.Patch elements found")
    major = _numeric(parts[0], "major", text)
    minor = _numeric(parts[1], "minor", text)
    patch = _numeric(parts[2], "patch", text)
    pre_ids = _identifiers(pre, "Prerelease", True) if dash else ()
    build_ids = _identifiers(build, "Build meta data", False) if "+" in text else ()
    return Version(major, minor, patch, pre_ids, build_ids)


def normalize(text: str) -> str:
    """The tolerant form of ``semver(s, true)``: ``v1.2`` -> ``1.2.0``, ``01.2.3`` -> ``1.2.3``."""
    s = text[1:] if text[:1] in ("v", "V") else text
    rest, plus, build = s.partition("+")
    core, dash, pre = rest.partition("-")
    parts = core.split(".")
    if 0 < len(parts) < 3:
        parts += ["0"] * (3 - len(parts))
    parts = [p.lstrip("0") or "0" if p.isdigit() else p for p in parts]
    out = ".".join(parts)
    if dash:
        out += "-" + pre
    if plus:
        out += "+" + build
    return out
