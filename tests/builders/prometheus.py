"""A Prometheus HTTP API on loopback that answers ``query_range`` as a test says, and the hostile
answers the culler must survive (``HOSTILE``): each keeps every server, none crashes a pass.

The answers follow Prometheus' API (https://prometheus.io/docs/prometheus/latest/querying/api/):
``{"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {...}, "values":
[[<time>, "<value>"], ...]}]}}``, one point per step at ``start + k*step`` for ``k = 0..n``, values as
strings (``"NaN"``, ``"+Inf"`` and ``"-Inf"`` too).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from tests.builders.hubapi import dcgm_labels

GR_ENGINE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"


def matrix(*series: Mapping[str, Any]) -> dict[str, Any]:
    """A ``query_range`` success answer holding ``series``."""
    return {"status": "success", "data": {"resultType": "matrix", "result": list(series)}}


@dataclass(frozen=True)
class Query:
    """One ``query_range`` request: its metric and the times of its points."""
    metric: str
    start: float
    end: float
    step: float

    @property
    def times(self) -> list[float]:
        n = round((self.end - self.start) / self.step)
        return [self.start + k * self.step for k in range(n + 1)]

    @classmethod
    def parse(cls, params: Mapping[str, str]) -> Query:
        query = params["query"]  # max_over_time(<metric>[<step>ms])
        metric = query[len("max_over_time("):query.index("[")]
        return cls(metric, float(params["start"]), float(params["end"]), float(params["step"]))


#: an answer: (HTTP status, body, content type)
Answer = tuple[int, bytes, str]
#: what the server answers a query with, given the pods' activity (pod name -> "busy" or "idle")
Responder = Callable[[Query, Mapping[str, str]], Answer]


def _json(doc: Any, status: int = 200) -> Answer:
    return status, json.dumps(doc).encode(), "application/json"


def series_for(q: Query, pod: str, values: list[Any], **label_kw: Any) -> dict[str, Any]:
    """One exporter series of ``pod`` (the labels Prometheus gives it: ``exported_pod``) with ``values``
    at the query's point times (a value may be anything: the answer is what is tested)."""
    labels = {"__name__": q.metric, **dcgm_labels(pod, exported=True, uuid=f"GPU-{pod}", **label_kw)}
    return {"metric": labels, "values": [[t, v] for t, v in zip(q.times, values)]}


def level(q: Query, activity: str) -> str:
    """A clean sample of the metric for a pod that is ``busy`` (0.8) or ``idle`` (0)."""
    busy = activity == "busy"
    return ("80" if busy else "0") if q.metric == GPU_UTIL else ("0.8" if busy else "0")


def clean(q: Query, pods: Mapping[str, str]) -> Answer:
    """Every pod's series, covering the window, at its level."""
    return _json(matrix(*(series_for(q, pod, [level(q, a)] * len(q.times)) for pod, a in pods.items())))


def _every_sample(value: Any) -> Responder:
    """Every sample of every pod's series is ``value``."""
    def answer(q: Query, pods: Mapping[str, str]) -> Answer:
        return _json(matrix(*(series_for(q, pod, [value] * len(q.times)) for pod in pods)))
    return answer


def _one_bad_sample(value: Any, metric: str | None = None) -> Responder:
    """Clean series, but the idle pods' carry ``value`` as one sample in the middle of the window
    (of ``metric`` only, when given): one bad sample is enough to keep a server."""
    def answer(q: Query, pods: Mapping[str, str]) -> Answer:
        out = []
        for pod, activity in pods.items():
            values: list[Any] = [level(q, activity)] * len(q.times)
            if activity == "idle" and metric in (None, q.metric):
                values[len(values) // 2] = value
            out.append(series_for(q, pod, values))
        return _json(matrix(*out))
    return answer


def _shape(build: Callable[[Query, Mapping[str, str]], Any]) -> Responder:
    """Clean series changed by ``build(q, pods) -> document``."""
    def answer(q: Query, pods: Mapping[str, str]) -> Answer:
        return _json(build(q, pods))
    return answer


def _raw(status: int, body: bytes, content_type: str = "application/json") -> Responder:
    return lambda q, pods: (status, body, content_type)


def _points(q: Query, pods: Mapping[str, str], point: Callable[[float, str], Any]) -> dict[str, Any]:
    out = []
    for pod, activity in pods.items():
        s = series_for(q, pod, [])
        s["values"] = [point(t, level(q, activity)) for t in q.times]
        out.append(s)
    return matrix(*out)


def _huge(q: Query, pods: Mapping[str, str]) -> Answer:
    """A clean answer buried in 5,000 series of free GPUs (no pod label) and 50,000 points per pod
    series, most outside the window: parsed in full, still right."""
    doc = matrix(*(series_for(q, pod, [level(q, a)] * len(q.times)) for pod, a in pods.items()))
    for s in doc["data"]["result"]:
        s["values"] = [[q.start - 10_000 + i * 0.01, "0.5"] for i in range(50_000)] + s["values"]
    free = {"metric": dcgm_labels(None, uuid="GPU-free"), "values": [[t, "0"] for t in q.times]}
    doc["data"]["result"] += [dict(free, metric=dict(free["metric"], UUID=f"GPU-free-{i}")) for i in range(5_000)]
    return _json(doc)


@dataclass(frozen=True)
class Hostile:
    """A hostile answer and what it must lead to for the idle pod: ``metrics_unusable`` (a sample is
    bad: the servers it belongs to are kept, the pass works) or ``no_metrics`` (the answer as a whole
    is not the API's: every GPU server is kept, the pass fails); ``busy``: the busy pod's verdict (its
    own, when only the idle pod's series were spoilt)."""
    respond: Responder
    verdict: str
    busy: str = ""

    def __post_init__(self) -> None:
        if not self.busy:
            object.__setattr__(self, "busy", self.verdict)


UNUSABLE, UNAVAILABLE, BUSY = "metrics_unusable", "no_metrics", "gpu_busy"

#: id -> the hostile answer; none of them may stop a server
HOSTILE: dict[str, Hostile] = {
    "nan": Hostile(_every_sample("NaN"), UNUSABLE),
    "plus-inf": Hostile(_every_sample("+Inf"), UNUSABLE),
    "minus-inf": Hostile(_every_sample("-Inf"), UNUSABLE),
    "negative": Hostile(_every_sample("-0.5"), UNUSABLE),
    "above-range": Hostile(_every_sample("1.5"), UNUSABLE),
    "null": Hostile(_every_sample(None), UNUSABLE),
    "word": Hostile(_every_sample("idle"), UNUSABLE),
    "empty-string": Hostile(_every_sample(""), UNUSABLE),
    "bool": Hostile(_every_sample(False), UNUSABLE),
    "list": Hostile(_every_sample([0]), UNUSABLE),
    "object": Hostile(_every_sample({"value": 0}), UNUSABLE),
    "huge-number": Hostile(_every_sample(10 ** 400), UNUSABLE),
    "one-nan": Hostile(_one_bad_sample("NaN"), UNUSABLE, BUSY),
    "one-null": Hostile(_one_bad_sample(None), UNUSABLE, BUSY),
    "util-nan-only": Hostile(_one_bad_sample("NaN", GPU_UTIL), UNUSABLE, BUSY),
    "util-over-100": Hostile(_one_bad_sample("250", GPU_UTIL), UNUSABLE, BUSY),
    "ratio-negative-zero-ish": Hostile(_one_bad_sample("-1e-9", GR_ENGINE), UNUSABLE, BUSY),
    "point-not-a-pair": Hostile(_shape(lambda q, pods: _points(q, pods, lambda t, v: [t])), UNUSABLE),
    "time-not-a-number": Hostile(_shape(lambda q, pods: _points(q, pods, lambda t, v: ["now", v])), UNUSABLE),
    "time-nan": Hostile(_shape(lambda q, pods: _points(q, pods, lambda t, v: ["NaN", v])), UNUSABLE),
    "values-missing": Hostile(_shape(lambda q, pods: matrix(*({"metric": series_for(q, pod, [])["metric"]}
                                                               for pod in pods))), UNUSABLE),
    "values-null": Hostile(_shape(lambda q, pods: matrix(*(dict(series_for(q, pod, []), values=None)
                                                           for pod in pods))), UNUSABLE),
    "labels-not-strings": Hostile(_shape(lambda q, pods: matrix(*(
        dict(series_for(q, pod, ["0"] * len(q.times)), metric={"exported_pod": None, "UUID": ["x"]})
        for pod in pods))), UNAVAILABLE),
    "series-not-object": Hostile(_shape(lambda q, pods: matrix("series", 1, None)), UNAVAILABLE),
    "data-not-object": Hostile(_shape(lambda q, pods: {"status": "success", "data": []}), UNAVAILABLE),
    "result-not-list": Hostile(_shape(lambda q, pods: {"status": "success",
                                                       "data": {"resultType": "matrix", "result": {}}}),
                               UNAVAILABLE),
    "vector": Hostile(_shape(lambda q, pods: {"status": "success",
                                              "data": {"resultType": "vector", "result": []}}), UNAVAILABLE),
    "status-error": Hostile(_shape(lambda q, pods: {"status": "error", "errorType": "bad_data",
                                                    "error": "invalid parameter"}), UNAVAILABLE),
    "json-null": Hostile(_raw(200, b"null"), UNAVAILABLE),
    "not-json": Hostile(_raw(200, b"<html><body>proxy says hello</body></html>", "text/html"), UNAVAILABLE),
    "empty-body": Hostile(_raw(200, b""), UNAVAILABLE),
    "deep-nesting": Hostile(_raw(200, b"[" * 200_000 + b"]" * 200_000), UNAVAILABLE),
    "http-500": Hostile(_raw(500, b"internal error", "text/plain"), UNAVAILABLE),
    "http-429-with-data": Hostile(lambda q, pods: (429, clean(q, pods)[1], "application/json"), UNAVAILABLE),
}

#: clean answers that are large or odd but right: the idle server is culled, the busy one kept
CLEAN = {"clean": clean, "huge": _huge}


class Cycle:
    """A responder that answers each culling pass with the next of ``responders`` (a pass starts with
    its ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` query), then the last one for good; ``passes``: passes begun."""

    def __init__(self, responders: list[Responder]):
        self.responders = responders
        self.passes = 0
        self._lock = threading.Lock()

    def __call__(self, q: Query, pods: Mapping[str, str]) -> Answer:
        with self._lock:
            if q.metric == GR_ENGINE:
                self.passes += 1
            i = min(max(self.passes - 1, 0), len(self.responders) - 1)
        return self.responders[i](q, pods)


def vector(*samples: Mapping[str, Any]) -> dict[str, Any]:
    """An instant query's (``/api/v1/query``) success answer holding ``samples``."""
    return {"status": "success", "data": {"resultType": "vector", "result": list(samples)}}


def sample(metric: str, pod: str, value: Any, **label_kw: Any) -> dict[str, Any]:
    """One exporter sample of ``pod`` as Prometheus gives it (``exported_pod``), at a fixed time."""
    return {"metric": {"__name__": metric, **dcgm_labels(pod, exported=True, **label_kw)}, "value": [1.7e9, value]}


#: what the server answers an instant query with (the PromQL text -> answer)
InstantResponder = Callable[[str], Answer]


class FakePrometheus:
    """``/api/v1/query_range`` on loopback, answered by ``respond`` for the pods in ``pods`` (pod name ->
    ``busy``/``idle``), and ``/api/v1/query`` by ``instant`` (a document, or a responder); ``queries``
    counts the requests, ``instant_queries`` holds the instant ones' PromQL."""

    def __init__(self, pods: Mapping[str, str] | None = None, respond: Responder = clean,
                 instant: Mapping[str, Any] | InstantResponder | None = None):
        self.pods = dict(pods or {})
        self.respond = respond
        self.instant = instant
        self.queries = 0
        self.instant_queries: list[str] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                url = urlparse(self.path)
                params = {k: v[0] for k, v in parse_qs(url.query).items()}
                if url.path == "/api/v1/query" and fake.instant is not None:
                    fake.instant_queries.append(params["query"])
                    instant = fake.instant
                    status, body, content_type = instant(params["query"]) if callable(instant) else _json(instant)
                elif url.path == "/api/v1/query_range":
                    status, body, content_type = fake.respond(Query.parse(params), fake.pods)
                else:
                    self.send_error(404)
                    return
                fake.queries += 1
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> FakePrometheus:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
