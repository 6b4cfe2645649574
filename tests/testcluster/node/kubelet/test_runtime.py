"""The container runtime and its shim with real processes: isolation, mounts, start errors, kills."""

from __future__ import annotations

import asyncio
import os
import threading

import pytest

from testcluster.node.kubelet import runtime as rt
from tests.builders.kubelet import marker, pids_with_marker

NAMESPACED = [m for m in ("namespaces", "userns") if rt._allowed() in ("namespaces", "userns")
              and (m == "userns" or rt._allowed() == "namespaces")]
ALL = NAMESPACED + ["processes"]


async def _run(tmp_path, isolation, argv, *, mounts=(), cwd="/", env=None, mode="run", target=None):
    out: list[bytes] = []
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    spec = rt.ProcessSpec(list(argv), {"PATH": "/usr/bin:/bin", **(env or {})}, cwd, list(mounts),
                          shared=[str(work)], scratch=str(work / "scratch"), hostname="pod-x",
                          private_tmp=isolation != "processes")
    p = await rt.start(spec, mode=mode, isolation_mode=isolation, config_dir=str(work), on_stdout=out.append,
                       on_stderr=out.append, target=target)
    return p, out


@pytest.mark.parametrize("isolation", NAMESPACED)
async def test_a_container_has_its_own_pids_hostname_and_mounts(tmp_path, isolation):
    src = tmp_path / "cfg"
    src.mkdir()
    (src / "f").write_text("content\n")
    script = ("echo $$; hostname; cat /etc/sim-test-cfg/f; ls /sim-test-new; pwd; "
              "touch /etc/sim-test-cfg/x 2>/dev/null || echo read-only; "
              f"ls /tmp | grep -v {tmp_path.parts[2]} | wc -l; echo mine > /tmp/sim-test-own")
    p, out = await _run(tmp_path, isolation, ["sh", "-c", script], cwd="/sim-test-wd/sub",
                        mounts=[rt.Mount(str(src), "/etc/sim-test-cfg", True), rt.Mount(str(src), "/sim-test-new")])
    assert await p.wait() == 0
    assert b"".join(out).decode().splitlines() == ["2", "pod-x", "content", "f", "/sim-test-wd/sub", "read-only",
                                                   "0"]  # /tmp: its own, with only the kubelet's directory
    for path in ("/etc/sim-test-cfg", "/sim-test-new", "/sim-test-wd", "/tmp/sim-test-own"):
        assert not os.path.exists(path)  # the machine's tree never changed


@pytest.mark.parametrize("isolation", ALL)
async def test_every_process_of_a_container_ends_with_it(tmp_path, isolation):
    mark = marker()
    p, _ = await _run(tmp_path, isolation, ["sh", "-c", "setsid sleep 600 & sleep 0.5; exit 5"],
                      env={"SIM_TEST_MARKER": mark})
    assert await p.wait() == 5
    assert pids_with_marker(mark) == []
    mark = marker()
    p, _ = await _run(tmp_path, isolation, ["sh", "-c", "setsid sleep 600 & sleep 600"], env={"SIM_TEST_MARKER": mark})
    for _ in range(100):
        if len(pids_with_marker(mark)) >= 2:
            break
        await asyncio.sleep(0.05)
    p.kill()
    assert await asyncio.wait_for(p.wait(), 10) == 137
    assert pids_with_marker(mark) == []


@pytest.mark.parametrize("isolation", ALL)
async def test_exec_joins_the_container(tmp_path, isolation):
    p, _ = await _run(tmp_path, isolation, ["sh", "-c", "echo data > /tmp/sim-test-exec-$$; sleep 600"],
                      env={"WHO": "container"})
    e, out = await _run(tmp_path, isolation, ["sh", "-c", "echo $WHO; exit 9"], env={"WHO": "exec"}, mode="exec",
                        target=p.init_pid)
    assert await e.wait() == 9 and b"".join(out) == b"exec\n"
    if isolation != "processes":
        e, out = await _run(tmp_path, isolation, ["sh", "-c", "ps -o pid= | head -1"], mode="exec", target=p.init_pid)
        await e.wait()
        assert b"".join(out).split()[0] == b"1"  # the container's PID namespace
    p.kill()
    await p.wait()


@pytest.mark.parametrize("isolation", ALL)
async def test_start_errors_are_worded_as_runc_words_them(tmp_path, isolation):
    with pytest.raises(rt.StartError) as e:
        await _run(tmp_path, isolation, ["no-such-binary"])
    assert (e.value.stage, str(e.value)) == ("exec", 'exec: "no-such-binary": executable file not found in $PATH')
    with pytest.raises(rt.StartError) as e:
        await _run(tmp_path, isolation, ["/nonexistent/tool"])
    assert str(e.value) == 'exec: "/nonexistent/tool": stat /nonexistent/tool: No such file or directory'


@pytest.mark.parametrize("isolation", NAMESPACED)
async def test_a_directory_cannot_be_mounted_over_a_file(tmp_path, isolation):
    src = tmp_path / "d"
    src.mkdir()
    with pytest.raises(rt.StartError) as e:
        await _run(tmp_path, isolation, ["true"], mounts=[rt.Mount(str(src), "/etc/hostname")])
    assert e.value.stage == "mount"
    assert str(e.value) == f'error mounting "{src}" to rootfs at "/etc/hostname": Not a directory'


async def test_a_terminal_and_its_size(tmp_path):
    out: list[bytes] = []
    spec = rt.ProcessSpec(["sh", "-c", "sleep 0.3; stty size; tty"], {"PATH": "/usr/bin:/bin"}, "/", tty=True)
    p = await rt.start(spec, mode="run", isolation_mode="processes", config_dir=str(tmp_path), on_stdout=out.append,
                       on_stderr=out.append)
    rt.resize(p.tty_fd, 120, 40)
    assert await p.wait() == 0
    text = b"".join(out).decode()
    assert text.splitlines()[0] == "40 120" and "/dev/pts/" in text


@pytest.mark.parametrize("isolation", ALL)
def test_a_container_runs_at_the_cpu_priority_of_its_kubelet(tmp_path, isolation):
    # its own session is a scheduling group of its own (Linux's autogroup), which would weigh as
    # nice 0 whatever its processes' niceness: it gets the kubelet's niceness, as its processes do
    result: dict[str, object] = {}

    def kubelet() -> None:  # niceness is per thread on Linux: a thread of its own at nice 3
        os.setpriority(os.PRIO_PROCESS, 0, 3)

        async def go() -> str:
            p, out = await _run(tmp_path, isolation, ["sh", "-c", "cat /proc/self/stat; cat /proc/self/autogroup"])
            assert await p.wait() == 0
            return b"".join(out).decode()
        try:
            result["out"] = asyncio.run(go())
        except BaseException as e:
            result["error"] = e

    t = threading.Thread(target=kubelet)
    t.start()
    t.join(60)
    if "error" in result:
        raise result["error"]  # type: ignore[misc]
    lines = str(result["out"]).splitlines()
    assert lines[0].rsplit(")", 1)[1].split()[16] == "3"  # the process's niceness (proc(5), field 19)
    if os.path.exists("/proc/self/autogroup"):
        assert lines[1].endswith(" nice 3"), lines[1]


def test_image_paths_keep_a_python_environment_in_tmp_visible(monkeypatch, tmp_path):
    # a CI clone and its virtualenv under /tmp must stay visible under a container's private /tmp
    import sys

    from testcluster.node.kubelet import runtime

    venv = tmp_path / "clone" / ".venv"
    (venv / "bin").mkdir(parents=True)
    (tmp_path / "clone" / "src").mkdir()
    monkeypatch.setattr(sys, "prefix", str(venv))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "clone" / "src"))
    monkeypatch.setenv("PATH", f"{venv / 'bin'}{os.pathsep}/usr/bin")
    runtime.image_paths.cache_clear()
    try:
        paths = runtime.image_paths()
    finally:
        runtime.image_paths.cache_clear()
    real = os.path.realpath
    if real(str(tmp_path)).startswith("/tmp/"):
        assert real(str(venv)) in paths and real(str(tmp_path / "clone" / "src")) in paths
        assert real(str(venv / "bin")) not in paths  # inside the venv, shared with it
    assert all(p.startswith("/tmp/") for p in paths)
