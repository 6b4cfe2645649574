"""``gpuspawner probe`` with fake NVML modules: the JSON report and the exit status."""

import json

import pytest

from gpuspawner.cli import build_parser
from gpuspawner.commands import probe

from tests.builders import fake_pynvml, require_samples

SAMPLES = {row["cuda_version"]: row["nvidia_require_cuda"] for row in require_samples()}


def run(tmp_path, capsys, fixture, *argv, env_node="gpu-7"):
    report = tmp_path / "termination-log"
    args = build_parser("probe").parse_args(
        ["probe", "--report", str(report), "--node", env_node, *argv]
    )
    code = probe.main(args, pynvml=fake_pynvml(fixture))
    out = capsys.readouterr().out.splitlines()
    return code, json.loads(report.read_text()), out


@pytest.mark.parametrize(
    "fixture, argv, code, level, check",
    [
        ("a100-mig-570", ["--expect-gpus", "8", "--cuda", "12.8"], 0, "ok", "cuda"),
        ("a100-mig-570", ["--expect-gpus", "2", "--cuda", "12.9"], 0, "warn", "cuda"),
        ("a100-mig-570", ["--cuda", "12.9", "--policy", "strict"], 1, "fail", "cuda"),
        ("a100-mig-570", ["--cuda", "13.0"], 1, "fail", "cuda"),
        (
            "a100-mig-570",
            ["--cuda", "13.0", "--compat", "13.0", "--policy", "forward"],
            0,
            "warn",
            "cuda",
        ),
        ("a100-mig-570", ["--expect-gpus", "9"], 1, "fail", "gpu-count"),
        ("a100-mig-570", ["--expect-gpus", "0"], 0, "ok", "cuda"),
        ("t4-535-bytes", ["--expect-gpus", "1", "--require", SAMPLES["12.4.1"]], 0, "warn", "cuda"),
        ("t4-535-bytes", ["--require", "driver>=550"], 1, "fail", "cuda"),
        ("geforce-4090-550", ["--expect-gpus", "2", "--cuda", "12.4"], 0, "ok", "cuda"),
        # 13.0 on GeForce 550: no minor-version compat across majors, no forward compat on GeForce
        (
            "geforce-4090-550",
            ["--cuda", "13.0", "--compat", "13.0", "--policy", "forward"],
            1,
            "fail",
            "cuda",
        ),
        ("v100-580", ["--cuda", "13.0"], 1, "fail", "cuda"),
        ("old-binding", ["--cuda", "11.4"], 0, "ok", "cuda"),
        ("no-driver", ["--cuda", "12.2"], 1, "fail", "driver"),
        ("driver-not-loaded", [], 1, "fail", "driver"),
        ("gpu-lost", [], 1, "fail", "driver"),
        ("t4-535-bytes", ["--cuda", "v12"], 2, "fail", "arguments"),
        ("t4-535-bytes", ["--require", "cuda==12"], 2, "fail", "arguments"),
    ],
)
def test_probe(tmp_path, capsys, fixture, argv, code, level, check):
    got, report, out = run(tmp_path, capsys, fixture, *argv)
    assert got == code
    assert (report["level"], report["check"], report["ok"]) == (level, check, code == 0)
    assert len(out) == 1 and out[0].startswith("gpuspawner probe: ")
    assert report["message"] in out[0]


def test_no_driver_names_the_node(tmp_path, capsys):
    _, report, out = run(tmp_path, capsys, "no-driver", "--cuda", "12.2", env_node="gpu-node-3")
    assert report["message"] == (
        "no NVIDIA driver is visible in the container: is the NVIDIA device plugin / "
        "container runtime set up on node gpu-node-3?"
    )
    assert report["nvml_error"]["code"] == 12


def test_too_few_gpus(tmp_path, capsys):
    _, report, _ = run(tmp_path, capsys, "t4-535-bytes", "--expect-gpus", "4")
    assert "asked for 4 GPU(s) but only 1 are visible" in report["message"]
    assert report["visible_gpus"] == 1 and report["driver"] == "535.183.01"


def test_report_carries_the_verdict_and_fits_a_termination_message(tmp_path, capsys):
    _, report, _ = run(tmp_path, capsys, "a100-mig-570", "--cuda", "12.9")
    assert report["verdict"]["rule"] == "minor-version"
    assert report["cuda"] == "12.8" and len(report["gpus"]) == 8
    assert len(json.dumps(report, sort_keys=True).encode()) <= probe.MAX_REPORT_BYTES


def test_an_oversized_report_is_trimmed():
    report = {
        "ok": False,
        "level": "fail",
        "check": "cuda",
        "message": "x" * 10000,
        "gpus": [{"name": "g" * 100}] * 100,
        "verdict": {},
    }
    body = probe._trim(report)
    assert len(body.encode()) <= probe.MAX_REPORT_BYTES
    assert json.loads(body)["level"] == "fail"
    # characters that JSON escapes grow up to 12 bytes each
    body = probe._trim({**report, "message": "\U0001f525\x01" * 3000, "node": "n" * 5000})
    assert len(body.encode()) <= probe.MAX_REPORT_BYTES
    assert json.loads(body)["message"].startswith("\U0001f525")


def test_unwritable_report_path_falls_back_to_stdout(tmp_path, capsys):
    args = build_parser("probe").parse_args(
        [
            "probe",
            "--report",
            str(tmp_path / "missing-dir" / "log"),
            "--node",
            "n",
            "--cuda",
            "12.2",
        ]
    )
    code = probe.main(args, pynvml=fake_pynvml("t4-535-bytes"))
    captured = capsys.readouterr()
    assert code == 0
    lines = captured.out.splitlines()
    assert json.loads(lines[0])["level"] == "ok"
    assert lines[1].startswith("gpuspawner probe: ok")
    assert "cannot write the report" in captured.err


def test_expected_gpus_from_the_environment(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GPUSPAWNER_EXPECT_GPUS", "3")
    code, report, _ = run(tmp_path, capsys, "geforce-4090-550")
    assert code == 1 and report["check"] == "gpu-count" and report["expected_gpus"] == 3
    monkeypatch.setenv("GPUSPAWNER_EXPECT_GPUS", "lots")
    code, report, _ = run(tmp_path, capsys, "geforce-4090-550")
    assert code == 2 and "GPUSPAWNER_EXPECT_GPUS" in report["message"]


def test_bad_expect_gpus_flag_is_a_usage_error():
    with pytest.raises(SystemExit) as e:
        build_parser("probe").parse_args(["probe", "--expect-gpus", "-1"])
    assert e.value.code == 2
