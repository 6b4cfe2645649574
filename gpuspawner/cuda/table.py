"""The CUDA toolkit -> minimum NVIDIA driver table, shipped as package data.
Design notes: docs/cuda-compatibility.md.
"""

from __future__ import annotations

import csv
import functools
import io
import re
from dataclasses import dataclass
from importlib import resources

from gpuspawner.cuda.versions import Version, VersionError, compare, parse_driver

_TOOLKIT = re.compile(r"^\s*(\d+)\.(\d+)")


@dataclass(frozen=True, slots=True)
class Release:
    """One row of the table."""

    toolkit: str  # as NVIDIA names it: "12.2 Update 1"
    cuda: tuple[int, int]  # (12, 2)
    min_driver: Version | None  # full support; None when unknown (13.4)
    min_driver_text: str  # "535.86.09", or NVIDIA's words when unknown
    mvc_floor: Version | None  # minor-version compatibility floor; None before CUDA 11
    status: str  # verified | secondary | uncertain
    source: str


class TableError(ValueError):
    """The shipped table (or a replacement an admin points at) is malformed."""


def parse_table(text: str) -> tuple[Release, ...]:
    """Parse the CSV text; ``#`` lines are comments.  Raises :class:`TableError`."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    reader = csv.DictReader(io.StringIO("\n".join(lines)))
    wanted = {
        "cuda_toolkit",
        "min_driver_linux_full",
        "min_driver_linux_minor_compat",
        "status",
        "source",
    }
    if not reader.fieldnames or not wanted <= set(reader.fieldnames):
        raise TableError(f"the CUDA driver table needs the columns {sorted(wanted)}")
    rows = []
    for n, row in enumerate(reader, start=2):
        m = _TOOLKIT.match(row["cuda_toolkit"] or "")
        if not m:
            raise TableError(f"row {n}: toolkit {row['cuda_toolkit']!r} does not start with X.Y")
        full_text = (row["min_driver_linux_full"] or "").strip()
        try:
            full = parse_driver(full_text)
        except VersionError:
            full = None  # "UNKNOWN (R615/R616 branch)"
        mvc_text = (row["min_driver_linux_minor_compat"] or "").strip()
        try:
            mvc = parse_driver(mvc_text) if mvc_text else None
        except VersionError as e:
            raise TableError(f"row {n}: {e}") from None
        status = (row["status"] or "").strip()
        if status not in ("verified", "secondary", "uncertain"):
            raise TableError(f"row {n}: status {status!r} is not verified, secondary or uncertain")
        rows.append(
            Release(
                toolkit=row["cuda_toolkit"].strip(),
                cuda=(int(m.group(1)), int(m.group(2))),
                min_driver=full,
                min_driver_text=full_text,
                mvc_floor=mvc,
                status=status,
                source=(row["source"] or "").strip(),
            )
        )
    if not rows:
        raise TableError("the CUDA driver table has no rows")
    return tuple(rows)


@functools.cache
def releases() -> tuple[Release, ...]:
    """Every row of the shipped table, in file order (oldest first)."""
    text = resources.files("gpuspawner").joinpath("data/cuda-driver-table.csv").read_text("utf-8")
    return parse_table(text)


def min_driver_for_cuda(
    cuda: tuple[int, int], table: tuple[Release, ...] | None = None
) -> Release | None:
    """The row giving the oldest driver with *full* support for CUDA ``X.Y``.

    That is the GA row of that minor release (its first update never needs an
    older driver).  None when the table has no known driver for ``X.Y``
    (CUDA 12.7 does not exist; 13.4's driver is unknown).
    """
    best: Release | None = None
    for r in table or releases():
        if r.cuda == cuda and r.min_driver is not None:
            if best is None or compare(r.min_driver, best.min_driver) < 0:  # type: ignore[arg-type]
                best = r
    return best


def cuda_for_driver(
    driver: Version, table: tuple[Release, ...] | None = None
) -> tuple[tuple[int, int], Release] | None:
    """The newest CUDA ``X.Y`` whose minimum full-support driver is <= ``driver``.

    This is a *lower bound* of what the driver really supports: the exact value
    is ``nvmlSystemGetCudaDriverVersion`` (GFD's ``cuda.runtime-version``
    labels), and e.g. R565 drivers report 12.7, a CUDA with no toolkit row, so
    the table says 12.6 for them.  Erring low can only turn an "ok" into a
    "warn", never let an incompatible image through.  None when the driver is
    older than every row (before CUDA 10.0's 410.48).
    """
    best: tuple[tuple[int, int], Release] | None = None
    for r in table or releases():
        if r.min_driver is None or compare(r.min_driver, driver) > 0:
            continue
        if best is None or r.cuda > best[0]:
            best = (r.cuda, r)
    return best


def mvc_floors(table: tuple[Release, ...] | None = None) -> dict[int, tuple[Version, str]]:
    """CUDA major -> (minor-version-compatibility driver floor, status), from the table.

    11: 450.80.02 (verified), 12: 525.60.13 (NVIDIA now only says ">= 525"; the
    exact patch level comes from older copies of Table 2: secondary), 13:
    580.65.06 (NVIDIA says ">= 580"; 580.65.06 is the first R580 that shipped
    with a toolkit: an inference).  Source:
    https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html.
    """
    out: dict[int, tuple[Version, str]] = {}
    for r in table or releases():
        if r.mvc_floor is not None and r.cuda[0] not in out:
            out[r.cuda[0]] = (r.mvc_floor, r.status)
    return out
