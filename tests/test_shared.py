"""Where gpuspawner's shared files are found (``gpuspawner.shared``): the environment's prefix first, then a
``--user``/``--prefix`` install's ``share/`` above the package, then the source checkout; a clear error
when they are nowhere."""

from __future__ import annotations

from pathlib import Path

import pytest

import gpuspawner
from gpuspawner.hub.templates import hub_template_dir, template_dirs
from gpuspawner.shared import SharedFilesMissing, candidates, shared_dir

ROOT = Path(__file__).resolve().parents[1]


def make(path: Path) -> Path:
    path.mkdir(parents=True)
    return path


CASES = {
    # (directories that exist, relative to tmp; the one found)
    "prefix-wins": (["venv/share/gpuspawner/templates", "src/share/templates"], "venv/share/gpuspawner/templates"),
    "user-install": (["home/.local/share/gpuspawner/templates", "src/share/templates"],
                     "home/.local/share/gpuspawner/templates"),
    "editable-checkout": (["src/share/templates"], "src/share/templates"),
}


@pytest.mark.parametrize("dirs,found", CASES.values(), ids=CASES)
def test_the_first_place_that_exists_is_used(tmp_path, dirs, found):
    for d in dirs:
        make(tmp_path / d)
    # a --user install's package (user-install), or a checkout's (the others) under tmp/src
    package = tmp_path / ("home/.local/lib/python3.11/site-packages/gpuspawner" if ".local" in found
                          else "src/gpuspawner")
    make(package)
    assert shared_dir("templates", prefix=str(tmp_path / "venv"), package_dir=package) == tmp_path / found


def test_the_snippet_is_looked_for_at_the_checkouts_top(tmp_path):
    places = candidates("jupyterhub_config.d", str(tmp_path / "venv"), tmp_path / "src" / "gpuspawner")
    assert places[0] == tmp_path / "venv" / "share" / "gpuspawner" / "jupyterhub_config.d"
    assert places[-1] == tmp_path / "src" / "jupyterhub_config.d"


def test_nowhere_says_where_it_looked(tmp_path):
    with pytest.raises(SharedFilesMissing, match="templates directory is missing: looked in .*venv/share/gpuspawner/"
                                                 "templates.*Reinstall gpuspawner"):
        shared_dir("templates", prefix=str(tmp_path / "venv"), package_dir=make(tmp_path / "src" / "gpuspawner"))


def test_this_checkout_serves_its_own_files():
    # the editable install of the development environment installs no data files: the checkout's are found
    assert Path(str(gpuspawner.config_snippet())) == ROOT / "jupyterhub_config.d" / "gpuspawner.py"
    assert template_dirs() == [str(ROOT / "share" / "templates")]
    assert hub_template_dir() == str(ROOT / "share" / "templates" / "hub")
