"""Every row of the shipped CUDA -> driver table (NVIDIA release notes, Tables 2 and 3)."""

import pytest

from gpuspawner.cuda import table
from gpuspawner.cuda.image import ImageCuda
from gpuspawner.cuda.compatibility import NodeCuda, decide
from gpuspawner.cuda.versions import fmt

ROWS = table.releases()
KNOWN = [r for r in ROWS if r.min_driver is not None]


def _below(version):
    """The driver version just below ``version``."""
    *head, last = version
    return tuple(head) + (last - 1,) if last > 0 else tuple(head[:-1]) + (head[-1] - 1, 99)


def test_the_table_covers_cuda_10_to_13_and_marks_provenance():
    assert ROWS[0].cuda == (10, 0) and ROWS[-1].cuda == (13, 4)
    assert {r.status for r in ROWS} == {"verified", "secondary", "uncertain"}
    assert all(r.status == "secondary" for r in ROWS if r.cuda == (13, 3))
    assert [r.min_driver for r in ROWS if r.cuda == (13, 4)] == [None]
    assert all(r.source for r in ROWS)


@pytest.mark.parametrize("row", KNOWN, ids=lambda r: r.toolkit)
def test_a_row_minimum_driver_supports_that_cuda(row):
    cuda, _ = table.cuda_for_driver(row.min_driver)
    assert cuda == row.cuda
    # the image of that release is accepted on its own driver, without minor-version compat
    v = decide(ImageCuda(cuda=row.cuda), NodeCuda(driver=fmt(row.min_driver)), "strict")
    assert (v.level, v.rule) == ("ok", "backward")


GA_ROWS = [r for r in KNOWN if r is table.min_driver_for_cuda(r.cuda)]


@pytest.mark.parametrize("row", GA_ROWS, ids=lambda r: r.toolkit)
def test_just_below_a_releases_first_driver_the_table_gives_an_older_cuda(row):
    found = table.cuda_for_driver(_below(row.min_driver))
    assert found is None or found[0] < row.cuda
    v = decide(ImageCuda(cuda=row.cuda), NodeCuda(driver=fmt(_below(row.min_driver))), "strict")
    assert v.level == "fail" and v.rule == "driver-too-old"
    assert row.min_driver_text in v.fix  # names the driver the admin must install


MVC_ROWS = [r for r in KNOWN if r.mvc_floor is not None]


@pytest.mark.parametrize("row", MVC_ROWS, ids=lambda r: r.toolkit)
def test_minor_version_floor_of_each_row(row):
    at_floor = NodeCuda(driver=fmt(row.mvc_floor))
    v = decide(ImageCuda(cuda=row.cuda), at_floor, "minor")
    assert v.level in ("ok", "warn")
    if v.level == "warn":
        assert v.rule == "minor-version"
    below = NodeCuda(driver=fmt(_below(row.mvc_floor)))
    found = table.cuda_for_driver(_below(row.mvc_floor))
    if found is None or found[0] < row.cuda:
        assert decide(ImageCuda(cuda=row.cuda), below, "minor").level == "fail"


def test_no_minor_version_compatibility_before_cuda_11():
    assert all(r.mvc_floor is None for r in ROWS if r.cuda[0] < 11)
    v = decide(ImageCuda(cuda=(10, 2)), NodeCuda(driver="418.39"), "minor")
    assert v.level == "fail" and "no minor-version compatibility" in v.reason


@pytest.mark.parametrize(
    "major, floor",
    [(11, (450, 80, 2)), (12, (525, 60, 13)), (13, (580, 65, 6))],
)
def test_family_floors(major, floor):
    assert table.mvc_floors()[major][0] == floor


@pytest.mark.parametrize(
    "driver, cuda",
    [
        ("535.183.01", (12, 2)),
        ("550.107.02", (12, 4)),
        ("565.57.01", (12, 6)),
        ("570.26", (12, 8)),
        ("410.48", (10, 0)),
        ("610.43.02", (13, 3)),
    ],
)
def test_cuda_for_driver(driver, cuda):
    from gpuspawner.cuda.versions import parse_driver

    assert table.cuda_for_driver(parse_driver(driver))[0] == cuda


def test_a_driver_older_than_every_row_has_no_cuda():
    assert table.cuda_for_driver((410, 47)) is None


def test_cuda_13_4_has_no_known_driver_but_runs_by_minor_version_compat():
    assert table.min_driver_for_cuda((13, 4)) is None
    v = decide(ImageCuda(cuda=(13, 4)), NodeCuda(driver="580.65.06", driver_cuda="13.0"))
    assert v.level == "warn" and "a driver that supports CUDA 13.4" in v.fix


def test_a_malformed_table_is_rejected():
    with pytest.raises(table.TableError, match="columns"):
        table.parse_table("a,b\n1,2\n")
    header = "cuda_toolkit,min_driver_linux_full,min_driver_linux_minor_compat,status,source\n"
    with pytest.raises(table.TableError, match="status"):
        table.parse_table(header + "12.0 GA,525.60.13,525.60.13,guess,x\n")
