"""CPU time of a process tree, read from Linux's ``/proc``.  Stdlib only.
Design notes: docs/simulated-nodes.md.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import NamedTuple

__all__ = ["ProcStat", "parse_stat", "read_stats", "tree_cpu_seconds"]

try:
    _TICKS = float(os.sysconf("SC_CLK_TCK"))
except (AttributeError, ValueError, OSError):  # not POSIX
    _TICKS = 100.0


class ProcStat(NamedTuple):
    ppid: int
    cpu_seconds: float  # utime + stime + cutime + cstime


def parse_stat(text: str, ticks: float = _TICKS) -> ProcStat | None:
    """One ``/proc/<pid>/stat`` line; None if it is not in proc(5)'s shape."""
    _, sep, rest = text.rpartition(")")
    if not sep:
        return None
    fields = rest.split()
    # fields[0] is field 3 (state): ppid is fields[1], utime..cstime are fields[11:15]
    if len(fields) < 15:
        return None
    try:
        ppid = int(fields[1])
        used = sum(int(x) for x in fields[11:15])
    except ValueError:
        return None
    return ProcStat(ppid, used / ticks)


def read_stats(proc: str = "/proc") -> dict[int, ProcStat]:
    """Every process's parent and CPU seconds, read now.  Processes that end while
    they are read are skipped; an unreadable ``/proc`` gives an empty table."""
    try:
        names = os.listdir(proc)
    except OSError:
        return {}
    table: dict[int, ProcStat] = {}
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(os.path.join(proc, name, "stat"), encoding="utf-8", errors="replace") as f:
                parsed = parse_stat(f.read())
        except OSError:
            continue
        if parsed is not None:
            table[int(name)] = parsed
    return table


def tree_cpu_seconds(roots: Iterable[int], stats: Mapping[int, ProcStat]) -> float | None:
    """CPU seconds of ``roots`` and all their descendants; None when no root is alive."""
    children: dict[int, list[int]] = {}
    for pid, st in stats.items():
        children.setdefault(st.ppid, []).append(pid)
    todo = [pid for pid in roots if pid in stats]
    if not todo:
        return None
    seen: set[int] = set()
    total = 0.0
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += stats[pid].cpu_seconds
        todo.extend(children.get(pid, ()))
    return total
