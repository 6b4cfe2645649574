"""CPU time of a process tree, read from Linux's ``/proc``.  Stdlib only.

The simulated GPUs are busy when the pod holding them works: the simulated
DCGM (``sim/dcgm.py``) turns the CPU time a pod's processes use into GPU
activity.  A pod's processes are its containers' processes (the kubelet
knows their pids) and every descendant: a Jupyter server starts its kernels
in new sessions (``jupyter_client``'s launcher passes
``start_new_session=True``), so a process group or session would miss them;
the parent links (``ppid``) do not.

``/proc/<pid>/stat`` (proc(5)): after the command name in parentheses (which
may itself hold spaces and parentheses, hence the split at the *last* ``)``)
come ``state`` (field 3), ``ppid`` (4), ... ``utime`` (14), ``stime`` (15),
``cutime`` (16), ``cstime`` (17), in clock ticks.  A process's total is
``utime + stime + cutime + cstime``: the children it has waited for are
folded into ``cutime``/``cstime``, so the sum over a tree does not drop
when a child exits and is reaped.  (A child that exits unreaped still
counts through its own, zombie, entry; one reparented to init leaves the
tree, as it leaves the pod's cgroup only in this simulation.)

Linux only: elsewhere :func:`read_stats` returns an empty table and every
tree uses 0 s.
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
