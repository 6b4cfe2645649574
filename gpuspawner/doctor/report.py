"""Doctor's output: text for a terminal, JSON for machines.  Design notes: docs/troubleshooting.md."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

from gpuspawner.doctor.findings import SEVERITIES, Finding, exit_code, group_by_severity

__all__ = ["summary", "to_json", "render_json", "render_text"]

_TITLES = {"error": "ERRORS", "warning": "WARNINGS", "info": "INFO"}


def summary(findings: Sequence[Finding], facts: Mapping[str, Any] | None = None) -> dict[str, Any]:
    groups = group_by_severity(findings)
    out: dict[str, Any] = {
        "errors": len(groups["error"]),
        "warnings": len(groups["warning"]),
        "info": len(groups["info"]),
        "ok": exit_code(findings) == 0,
        "exit_code": exit_code(findings),
    }
    out.update(facts or {})
    return out


def to_json(findings: Sequence[Finding], facts: Mapping[str, Any] | None = None) -> dict[str, Any]:
    return {"findings": [f.to_json() for f in findings], "summary": summary(findings, facts)}


def render_json(findings: Sequence[Finding], facts: Mapping[str, Any] | None = None) -> str:
    return json.dumps(to_json(findings, facts), indent=2, sort_keys=False)


def _wrap(text: str, indent: str, width: int) -> str:
    return textwrap.fill(text, width=width, initial_indent=indent, subsequent_indent=indent + "  ",
                         break_long_words=False, break_on_hyphens=False)


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def render_text(findings: Sequence[Finding], facts: Mapping[str, Any] | None = None, width: int = 100) -> str:
    facts = dict(facts or {})
    lines: list[str] = []
    head = "gpuspawner doctor"
    if facts.get("server"):
        head += f": {facts['server']}"
    counts = []
    for key, word in (("nodes", "node"), ("gpu_nodes", "GPU node"), ("pods", "pod")):
        if facts.get(key) is not None:
            counts.append(_count(facts[key], word))
    if counts:
        head += f" ({', '.join(counts)})"
    lines.append(head)
    if facts.get("config"):
        lines.append(f"hub config: {facts['config']}")
    if facts.get("dra"):
        dra = facts["dra"]
        parts = [f"{dra[k]} {w}" if dra.get(k) is not None else f"{w}: not readable"
                 for k, w in (("classes", "DeviceClasses"), ("slices", "ResourceSlices"), ("claims", "ResourceClaims"))]
        lines.append("Dynamic Resource Allocation (resource.k8s.io/v1): " + ", ".join(parts))
    if facts.get("rbac_subject"):
        lines.append(f"RBAC checked for {facts['rbac_subject']}")
    groups = group_by_severity(findings)
    for severity in SEVERITIES:
        group = groups[severity]
        if not group:
            continue
        lines.append("")
        lines.append(f"{_TITLES[severity]} ({len(group)})")
        for f in group:
            lines.append(_wrap(f"[{f.id}] {f.summary}", "  ", width))
            if f.objects:
                lines.append(_wrap("objects: " + ", ".join(str(o) for o in f.objects), "    ", width))
            # never wrapped: it holds commands an admin copies
            lines.append(f"    fix: {f.fix}")
    s = summary(findings)
    lines.append("")
    if s["ok"]:
        tail = f" ({_count(s['info'], 'note')})" if s["info"] else ""
        lines.append(f"No problems found{tail}.")
    else:
        lines.append(f"{_count(s['errors'], 'error')}, {_count(s['warnings'], 'warning')}, "
                     f"{_count(s['info'], 'note')}. "
                     "See docs/troubleshooting.md for each finding id.")
    return "\n".join(lines)
