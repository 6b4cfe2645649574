"""``gpuspawner check-cuda``: exit 0 fits, 1 does not fit, 2 invalid; the verdict word first."""

import pathlib
import subprocess
import sys

import pytest

from gpuspawner.cli import main

from tests.builders import require_samples

ROOT = pathlib.Path(__file__).resolve().parents[2]
SAMPLES = {row["cuda_version"]: row["nvidia_require_cuda"] for row in require_samples()}


def run(capsys, *argv):
    code = main(["check-cuda", *argv])
    out = capsys.readouterr().out
    return code, out.splitlines()


@pytest.mark.parametrize(
    "argv, code, word",
    [
        (["--driver", "535.183.01", "--cuda", "12.2"], 0, "fits:"),
        (["--driver", "535.183.01", "--cuda", "12.4"], 0, "fits with a warning:"),
        (["--driver", "535.183.01", "--cuda", "12.4", "--policy", "strict"], 1, "does not fit:"),
        (
            [
                "--driver",
                "535.183.01",
                "--cuda",
                "12.4",
                "--driver-cuda",
                "12.4",
                "--policy",
                "strict",
            ],
            0,
            "fits:",
        ),
        (["--driver", "570.172.08", "--cuda", "13.0"], 1, "does not fit:"),
        (
            ["--driver", "570.172.08", "--cuda", "13.0", "--policy", "forward"],
            0,
            "fits with a warning:",
        ),
        (
            [
                "--driver",
                "570.172.08",
                "--cuda",
                "13.0",
                "--policy",
                "forward",
                "--brand",
                "geforce",
            ],
            1,
            "does not fit:",
        ),
        (
            [
                "--driver",
                "570.172.08",
                "--cuda",
                "13.0",
                "--policy",
                "forward",
                "--brand",
                "NVIDIA",
            ],
            0,
            "fits with a warning:",
        ),
        (
            ["--driver", "550.107.02", "--cuda", "13.0", "--policy", "forward"],
            1,
            "does not fit:",
        ),  # EOL branch
        (["--driver", "580.95.05", "--cuda", "13.0", "--arch", "7.0"], 1, "does not fit:"),
        (["--driver", "580.95.05", "--cuda", "13.0", "--arch", "7.5"], 0, "fits:"),
        (["--driver", "580.95.05", "--cuda", "12.8", "--arch", "7.0"], 0, "fits:"),
        (["--driver", "470.82.01", "--cuda", "12.0", "--arch", "3.7"], 1, "does not fit:"),
        (["--driver", "535", "--cuda", "12.1"], 0, "fits:"),
        (["--driver", "535.183", "--cuda", "12.2"], 0, "fits:"),
        (
            ["--driver", "525.60.13", "--cuda", "12.8"],
            0,
            "fits with a warning:",
        ),  # exactly the 12.x floor
        (["--driver", "525.60.12", "--cuda", "12.8"], 1, "does not fit:"),  # just below it
        (["--driver", "580.65.06", "--cuda", "13.2"], 0, "fits with a warning:"),
        (["--driver", "400.1", "--cuda", "10.0"], 1, "does not fit:"),
        (["--driver", "535.183.01", "--cuda", "12"], 0, "fits:"),
        (["--driver", "535.183.01", "--cuda", "12.2.1"], 0, "fits:"),
        (["--driver", "535.183.01", "--cuda", " 12.2"], 0, "fits:"),
        (["--driver", "535.183.01", "--cuda", "v12"], 2, "invalid:"),
        (["--driver", "535.183.01", "--cuda", "12.x"], 2, "invalid:"),
        (["--driver", "535.183.01", "--cuda", "-1"], 2, "invalid:"),
        (["--driver", "535.183.01", "--cuda", ""], 2, "invalid:"),
        (["--driver", "R535", "--cuda", "12.2"], 2, "invalid:"),
        (["--driver", "", "--cuda", "12.2"], 2, "invalid:"),
        (["--driver", "535.183.01", "--cuda", "12.2", "--driver-cuda", "12.x"], 2, "invalid:"),
        (["--driver", "535.183.01", "--cuda", "12.2", "--arch", "sm_80"], 2, "invalid:"),
        (["--driver", "535.183.01", "--cuda", "12.2", "--brand", "radeon"], 2, "invalid:"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_cuda_mode(capsys, argv, code, word):
    got, lines = run(capsys, *argv)
    assert got == code
    assert lines and lines[0].startswith(word), lines


@pytest.mark.parametrize(
    "argv, code, word",
    [
        (
            ["--driver", "535.104.05", "--require", SAMPLES["12.4.1"], "--brand", "GeForce"],
            0,
            "fits:",
        ),
        (
            ["--driver", "535.104.05", "--require", SAMPLES["12.5.1"], "--brand", "GeForce"],
            1,
            "does not fit:",
        ),
        (
            ["--driver", "535.104.05", "--require", SAMPLES["12.5.1"], "--brand", "geforce"],
            1,
            "does not fit:",
        ),
        (
            ["--driver", "535.104.05", "--require", SAMPLES["12.5.1"], "--brand", "NVIDIA"],
            0,
            "fits:",
        ),
        (
            ["--driver", "535.104.05", "--require", SAMPLES["12.5.1"]],
            0,
            "fits:",
        ),  # brand missing passes
        (
            ["--driver", "570.172.08", "--require", SAMPLES["13.0.0"], "--brand", "tesla"],
            0,
            "fits:",
        ),
        (
            ["--driver", "580.95.05", "--require", SAMPLES["13.0.0"], "--brand", "GeForce"],
            0,
            "fits:",
        ),
        (["--driver", "535.104.05", "--require", "cuda>=12.2"], 0, "fits:"),  # 12.2 from the table
        (
            ["--driver", "535.54.02", "--require", "cuda>=12.2"],
            1,
            "does not fit:",
        ),  # 12.1 from the table
        (
            ["--driver", "535.104.05", "--require", "cuda>=12.4", "--driver-cuda", "12.4"],
            0,
            "fits:",
        ),
        (["--driver", "300.1", "--require", "cuda>=12.0"], 0, "fits:"),  # cuda unknown: passes
        (["--driver", "300.1", "--require", "driver>=400"], 1, "does not fit:"),
        (["--driver", "535", "--require", "arch>=8.0", "--arch", "7.5"], 1, "does not fit:"),
        (["--driver", "535", "--require", "arch>=8.0"], 0, "fits:"),
        (["--driver", "535", "--require", "cuda==12.0"], 2, "invalid:"),
        (["--driver", "535", "--require", "foo>=1"], 2, "invalid:"),
        (["--driver", "535", "--require", "brand>geforce", "--brand", "geforce"], 2, "invalid:"),
        (["--driver", "535", "--require", "cuda>=12.x"], 2, "invalid:"),
        (["--driver", "R535", "--require", "cuda>=12.0"], 2, "invalid:"),
    ],
    ids=lambda v: " ".join(x[:40] for x in v) if isinstance(v, list) else None,
)
def test_require_mode(capsys, argv, code, word):
    got, lines = run(capsys, *argv)
    assert got == code
    assert lines and lines[0].startswith(word), lines


def test_the_verdict_line_carries_the_reason(capsys):
    _, lines = run(
        capsys, "--driver", "535.104.05", "--require", SAMPLES["13.0.0"], "--brand", "GeForce"
    )
    assert lines[0].startswith(
        "does not fit: unsatisfied condition: cuda>=13.0, please update your driver"
    )
    _, lines = run(capsys, "--driver", "R535", "--cuda", "12.2")
    assert lines == [
        "invalid: NVIDIA driver version 'R535' is not a version number: give digits "
        "separated by dots, like '535.183.01'"
    ]
    _, lines = run(capsys, "--driver", "535.183.01", "--cuda", "12.4")
    assert "minor-version" in lines[0] and "12.4" in lines[0] and "535.183.01" in lines[0]


@pytest.mark.parametrize(
    "argv",
    [
        ["--driver", "535"],  # neither --cuda nor --require
        ["--driver", "535", "--cuda", "12.2", "--require", "cuda>=12.2"],  # both
        ["--cuda", "12.2"],  # no driver
        ["--driver", "535", "--cuda", "12.2", "--policy", "lenient"],
    ],
)
def test_usage_errors_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(["check-cuda", *argv])
    assert e.value.code == 2


def test_as_a_program():
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuspawner",
            "check-cuda",
            "--driver",
            "535.183.01",
            "--cuda",
            "12.8",
            "--policy",
            "strict",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert p.returncode == 1 and p.stdout.startswith("does not fit:")
    p = subprocess.run(
        [sys.executable, "-m", "gpuspawner", "check-cuda", "--driver", "535"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert p.returncode == 2 and "Traceback" not in p.stderr
