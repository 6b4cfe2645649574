"""Container logs: the kubelet's log options and its refusals (pure), and following a live log."""

from __future__ import annotations

import asyncio

import pytest

from testcluster.node.kubelet.logs import (ContainerLog, LogError, LogLine, LogOptions, rfc3339nano, render,
                                         select_lines, stream_log, validate_status)

T0 = 1_700_000_000_000_000_000  # ns


def _lines(n, step=1_000_000_000):
    return [LogLine(T0 + i * step, "stdout", f"l{i}".encode()) for i in range(n)]


@pytest.mark.parametrize("ts,text", [
    (T0, "2023-11-14T22:13:20Z"),
    (T0 + 120_000_000, "2023-11-14T22:13:20.12Z"),
    (T0 + 1, "2023-11-14T22:13:20.000000001Z"),
])
def test_timestamps_are_go_rfc3339nano(ts, text):
    assert rfc3339nano(ts) == text
    assert render(LogLine(ts, "stdout", b"x"), True) == f"{text} x\n".encode()


@pytest.mark.parametrize("opts,expected", [
    (LogOptions(), ["l0", "l1", "l2", "l3", "l4"]),
    (LogOptions(tail_lines=2), ["l3", "l4"]),
    (LogOptions(tail_lines=0), []),
    (LogOptions(since_ns=T0 + 3_000_000_000), ["l3", "l4"]),
    # tail first, then since (kuberuntime/logs.ReadLogs)
    (LogOptions(tail_lines=3, since_ns=T0 + 3_000_000_000), ["l3", "l4"]),
], ids=["all", "tail", "tail0", "since", "tail-then-since"])
def test_select_lines(opts, expected):
    assert [line.data.decode() for line in select_lines(_lines(5), opts)] == expected


def test_lines_split_by_stream_and_a_last_partial_line_keeps_no_newline():
    log = ContainerLog(clock=lambda: T0)
    log.write("stdout", b"a\nb")
    log.write("stderr", b"err\n")
    log.write("stdout", b"c\nd")
    log.close()
    assert [(x.stream, x.data, x.partial) for x in log.lines] == [
        ("stdout", b"a", False), ("stderr", b"err", False), ("stdout", b"bc", False), ("stdout", b"d", True)]
    assert log.text() == "a\nerr\nbc\nd"


def test_the_log_keeps_its_last_lines():
    log = ContainerLog(max_lines=3)
    log.write("stdout", b"1\n2\n3\n4\n5\n")
    assert [x.data for x in log.lines] == [b"3", b"4", b"5"] and log.first_seq == 2
    assert [x.data for x in log.since(0)] == [b"3", b"4", b"5"]
    assert [x.data for x in log.since(4)] == [b"5"]


async def test_follow_streams_new_lines_and_limit_bytes_stops_it():
    log = ContainerLog()
    log.write("stdout", b"old\n")
    got: list[bytes] = []

    async def read(opts):
        async for chunk in stream_log(log, opts, lambda: True):
            got.append(chunk)

    reader = asyncio.create_task(read(LogOptions(follow=True)))
    await asyncio.sleep(0.05)
    log.write("stdout", b"new 1\n")
    await asyncio.sleep(0.05)
    assert got == [b"old\n", b"new 1\n"]
    log.write("stdout", b"new 2\n")
    log.close()
    await asyncio.wait_for(reader, 5)  # the instance ended: the stream ends
    assert got[-1] == b"new 2\n"
    got.clear()
    await read(LogOptions(limit_bytes=6))
    assert b"".join(got) == b"old\nne"


def _pod(state, last=None):
    status = {"name": "c", "state": state}
    if last is not None:
        status["lastState"] = {"terminated": last}
    return {"metadata": {"name": "p"}, "status": {"containerStatuses": [status]}}


@pytest.mark.parametrize("pod,previous,outcome", [
    (_pod({"running": {}}), False, "current"),
    (_pod({"terminated": {"containerID": "x"}}), False, "current"),
    (_pod({"waiting": {"reason": "CrashLoopBackOff"}}, {"containerID": "old"}), False, "previous"),
    (_pod({"running": {}}, {"containerID": "old"}), True, "previous"),
    (_pod({"running": {}}), True, 'previous terminated container "c" in pod "p" not found'),
    (_pod({"waiting": {"reason": "ContainerCreating"}}), False,
     'container "c" in pod "p" is waiting to start: ContainerCreating'),
    (_pod({"waiting": {"reason": "ImagePullBackOff"}}), False,
     'container "c" in pod "p" is waiting to start: trying and failing to pull image'),
    (_pod({}), False, 'container "c" in pod "p" is waiting to start - no logs yet'),
    ({"metadata": {"name": "p"}, "status": {}}, False, 'container "c" in pod "p" is not available'),
])
def test_validate_status_words_as_the_kubelet(pod, previous, outcome):
    if outcome in ("current", "previous"):
        assert validate_status(pod, "c", previous) == outcome
    else:
        with pytest.raises(LogError) as e:
            validate_status(pod, "c", previous)
        assert str(e.value) == outcome
