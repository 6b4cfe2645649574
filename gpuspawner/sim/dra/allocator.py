"""The structured-parameters allocator: devices for a pod's claims on one node.  Pure.
Design notes: docs/simulated-cluster.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence

from . import api
from .pools import Pool, device_node_matches, gather_pools

__all__ = ["DeviceID", "AllocationError", "SelectorCache", "allocate", "allocated_devices"]


@dataclass(frozen=True, order=True)
class DeviceID:
    driver: str
    pool: str
    device: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


class AllocationError(Exception):
    """Something is wrong with a claim or class: the scheduler aborts this attempt with it."""


def allocated_devices(claims: Sequence[Mapping[str, Any]]) -> set[DeviceID]:
    """Every device some claim's ``status.allocation`` holds."""
    out: set[DeviceID] = set()
    for c in claims:
        for r in (((c.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []:
            out.add(DeviceID(r.get("driver", ""), r.get("pool", ""), r.get("device", "")))
    return out


class SelectorCache:
    """Selector results per (expression, slice version, device): a device's attributes only
    change with its slice, so each pair is evaluated once (the real allocator caches per cycle)."""

    def __init__(self, max_entries: int = 200_000):
        self._results: dict[tuple, tuple[bool, str | None]] = {}
        self._vars: dict[tuple, Any] = {}
        self.max_entries = max_entries
        self.evaluations = 0

    def matches(self, expression: str, rs: Mapping[str, Any], index: int) -> tuple[bool, str | None]:
        """(match, error); the error is the CEL compile or runtime message."""
        from . import cel_environment  # cel-python loads with the first selector

        meta = rs.get("metadata") or {}
        dev_key = (meta.get("uid"), meta.get("resourceVersion"), index, id(rs) if not meta.get("uid") else 0)
        key = (expression,) + dev_key
        hit = self._results.get(key)
        if hit is not None:
            return hit
        if len(self._results) > self.max_entries:
            self._results.clear()
            self._vars.clear()
        try:
            program = cel_environment.compile_expression(expression)
        except cel_environment.CelCompileError as e:
            out: tuple[bool, str | None] = (False, f"CEL compile error: {e}")
        else:
            try:
                var = self._vars.get(dev_key)
                if var is None:
                    device = ((rs.get("spec") or {}).get("devices") or [])[index]
                    var = self._vars[dev_key] = cel_environment.device_variable((rs.get("spec") or {}).get("driver", ""),
                                                                      device)
                self.evaluations += 1
                out = (program.matches(var), None)
            except cel_environment.CelRuntimeError as e:
                out = (False, f"CEL runtime error: {e}")
        self._results[key] = out
        return out


@dataclass
class _Candidate:
    id: DeviceID
    device: Mapping[str, Any]
    slice: Mapping[str, Any]
    index: int


@dataclass
class _Request:
    """One request, or one subrequest of a ``firstAvailable`` list."""

    name: str  # "req" or "req/sub"
    base: str
    sub: str
    spec: Mapping[str, Any]
    cls: Mapping[str, Any]
    count: int = 0
    all_devices: list[_Candidate] = field(default_factory=list)

    @property
    def all_mode(self) -> bool:
        return self.spec.get("allocationMode") == api.ALL


class _MatchAttribute:
    """``matchAttributeConstraint``: every device of the named requests has the same value."""

    def __init__(self, requests: Sequence[str], attribute: str):
        self.requests = set(requests)
        self.attribute = attribute
        self.value: Any = None
        self.count = 0

    def _applies(self, req: _Request) -> bool:
        return not self.requests or req.base in self.requests or req.name in self.requests

    def _lookup(self, cand: _Candidate) -> Any:
        attrs = cand.device.get("attributes") or {}
        if self.attribute in attrs:
            return attrs[self.attribute]
        domain, _, ident = self.attribute.partition("/")
        return attrs.get(ident) if domain == cand.id.driver else None

    def add(self, req: _Request, cand: _Candidate) -> bool:
        if not self._applies(req):
            return True
        value = self._lookup(cand)
        if value is None or (self.count and value != self.value):
            return False
        if not self.count:
            self.value = value
        self.count += 1
        return True

    def remove(self, req: _Request, cand: _Candidate) -> None:
        if self._applies(req):
            self.count -= 1


def _claim_ref(claim: Mapping[str, Any]) -> str:
    meta = claim.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


class _Search:
    def __init__(self, claims: Sequence[Mapping[str, Any]], node: Mapping[str, Any], pools: list[Pool],
                 classes: Mapping[str, Mapping[str, Any]], allocated: set[DeviceID], cache: SelectorCache):
        self.claims, self.node, self.pools = claims, node, pools
        self.classes, self.allocated, self.cache = classes, allocated, cache
        self.taken: dict[DeviceID, int] = {}  # device -> claim index, in this search
        self.picked: list[list[tuple[_Request, _Candidate]]] = [[] for _ in claims]
        self.constraints: list[list[_MatchAttribute]] = []
        self.requests: list[list[list[_Request]]] = []  # claim -> request -> alternatives
        self.chosen: dict[tuple[int, int], int] = {}

    # -- preparation (validateDeviceRequest) --

    def prepare(self) -> None:
        for ci, claim in enumerate(self.claims):
            devices = (claim.get("spec") or {}).get("devices") or {}
            per_claim = []
            for req in devices.get("requests") or []:
                if req.get("firstAvailable"):
                    alts = [self._request(claim, f"{req['name']}/{s['name']}", req["name"], s["name"], s)
                            for s in req["firstAvailable"]]
                else:
                    alts = [self._request(claim, req["name"], req["name"], "", req.get("exactly") or {})]
                per_claim.append(alts)
            self.requests.append(per_claim)
            self.constraints.append([_MatchAttribute(c.get("requests") or [], c["matchAttribute"])
                                     for c in devices.get("constraints") or [] if c.get("matchAttribute")])

    def _request(self, claim: Mapping[str, Any], name: str, base: str, sub: str,
                 spec: Mapping[str, Any]) -> _Request:
        cls_name = spec.get("deviceClassName") or ""
        cls = self.classes.get(cls_name)
        if cls is None:
            raise AllocationError(f"claim {_claim_ref(claim)}, request {name}: could not retrieve device class "
                                  f'{cls_name}: deviceclass.resource.k8s.io "{cls_name}" not found')
        req = _Request(name, base, sub, spec, cls)
        mode = spec.get("allocationMode") or api.EXACT_COUNT
        if mode == api.EXACT_COUNT:
            req.count = int(spec.get("count") or 1)
        elif mode == api.ALL:
            for pool in self.pools:
                state = "currently being updated" if pool.incomplete else "currently invalid" if pool.invalid else ""
                if state:
                    raise AllocationError(f"claim {_claim_ref(claim)}, request {name}: asks for all devices, but "
                                          f"resource pool {pool.pool_id} is {state}")
                req.all_devices += [c for c in self._pool_devices(pool) if self._selectable(claim, req, c)]
            req.count = len(req.all_devices)
        else:
            raise AllocationError(f"claim {_claim_ref(claim)}, request {name}: unsupported count mode {mode}")
        return req

    # -- candidates and selectors --

    def _pool_devices(self, pool: Pool) -> Iterator[_Candidate]:
        for rs in pool.slices:
            spec = rs.get("spec") or {}
            for i, d in enumerate(spec.get("devices") or []):
                if spec.get("perDeviceNodeSelection") and not device_node_matches(d, self.node):
                    continue
                yield _Candidate(DeviceID(pool.driver, pool.name, d.get("name", "")), d, rs, i)

    def _selectable(self, claim: Mapping[str, Any], req: _Request, cand: _Candidate) -> bool:
        """Class selectors, then the request's (``isSelectable``/``selectorsMatch``)."""
        for owner, selectors in ((f"class {req.cls['metadata']['name']}", (req.cls.get("spec") or {}).get("selectors")),
                                 (f"claim {_claim_ref(claim)}", req.spec.get("selectors"))):
            for i, sel in enumerate(selectors or []):
                ok, err = self.cache.matches(((sel or {}).get("cel") or {}).get("expression", ""), cand.slice,
                                             cand.index)
                if err:
                    if err.startswith("CEL compile error"):
                        raise AllocationError(f"{owner}: selector #{i}: {err}")
                    raise AllocationError(f"{owner}: selector #{i} on device {cand.id}: {err}")
                if not ok:
                    return False
        return True

    # -- the search (allocateOne) --

    def _try(self, ci: int, req: _Request, cand: _Candidate) -> bool:
        if cand.id in self.allocated or cand.id in self.taken:
            return False
        added: list[_MatchAttribute] = []
        for c in self.constraints[ci]:
            if not c.add(req, cand):
                for a in added:
                    a.remove(req, cand)
                return False
            added.append(c)
        self.taken[cand.id] = ci
        self.picked[ci].append((req, cand))
        return True

    def _undo(self, ci: int, req: _Request, cand: _Candidate) -> None:
        for c in self.constraints[ci]:
            c.remove(req, cand)
        del self.taken[cand.id]
        self.picked[ci].pop()

    def run(self, ci: int = 0, ri: int = 0, di: int = 0, alt: int | None = None) -> bool:
        if ci >= len(self.claims):
            return True
        if ri >= len(self.requests[ci]):
            return self.run(ci + 1)
        alts = self.requests[ci][ri]
        if alt is None:
            for a in range(len(alts)):
                if self.run(ci, ri, 0, a):
                    self.chosen[(ci, ri)] = a
                    return True
            return False
        req = alts[alt]
        if req.all_mode and not req.all_devices:
            return False  # "At least one device is required for 'All' allocation mode."
        if di >= req.count:
            return self.run(ci, ri + 1)
        candidates = [req.all_devices[di]] if req.all_mode else self._candidates(ci, req)
        for cand in candidates:
            if not self._try(ci, req, cand):
                if req.all_mode:
                    return False
                continue
            if self.run(ci, ri, di + 1, alt):
                return True
            self._undo(ci, req, cand)
            if req.all_mode:
                return False
        return False

    def _candidates(self, ci: int, req: _Request) -> Iterator[_Candidate]:
        for pool in self.pools:
            if pool.incomplete or pool.invalid:
                continue
            for cand in self._pool_devices(pool):
                if cand.id in self.allocated or cand.id in self.taken:
                    continue
                if self._selectable(self.claims[ci], req, cand):
                    yield cand


def _config(claim: Mapping[str, Any], requests: Sequence[Sequence[_Request]], chosen: Mapping[int, int]) -> list[dict[str, Any]]:
    """The classes' config once per class (``FromClass``), then the claim's (``FromClaim``)."""
    out: list[dict[str, Any]] = []
    by_class: dict[str, list[int]] = {}
    spec_requests = ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []
    for ri, alts in enumerate(requests):
        req = alts[chosen.get(ri, 0)]
        name = req.cls["metadata"]["name"]
        if name in by_class:
            for i in by_class[name]:
                out[i]["requests"].append(req.name)
            continue
        by_class[name] = []
        for cfg in (req.cls.get("spec") or {}).get("config") or []:
            by_class[name].append(len(out))
            out.append({"source": "FromClass", "requests": [req.name], **{k: v for k, v in cfg.items()}})
    for cfg in ((claim.get("spec") or {}).get("devices") or {}).get("config") or []:
        entry = {"source": "FromClaim", **{k: v for k, v in cfg.items() if k != "requests"}}
        if cfg.get("requests"):
            entry["requests"] = list(cfg["requests"])
        out.append(entry)
    for entry in out:
        if entry.get("requests") is not None and len(entry["requests"]) == len(spec_requests):
            entry.pop("requests")
    return out


def _node_selector(picked: Sequence[tuple[_Request, _Candidate]]) -> dict[str, Any] | None:
    """``createNodeSelector``: the node's name when a device is node-local, else the slices'
    selectors merged into one term, else none (available everywhere)."""
    term: dict[str, list] = {"matchFields": [], "matchExpressions": []}
    for _, cand in picked:
        spec = cand.slice.get("spec") or {}
        src = cand.device if spec.get("perDeviceNodeSelection") else spec
        if src.get("nodeName"):
            return {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [src["nodeName"]]}]}]}
        terms = (src.get("nodeSelector") or {}).get("nodeSelectorTerms") or []
        if len(terms) == 1:
            for k in ("matchFields", "matchExpressions"):
                for r in terms[0].get(k) or []:
                    if r not in term[k]:
                        term[k].append(r)
    term = {k: v for k, v in term.items() if v}
    return {"nodeSelectorTerms": [term]} if term else None


def allocate(claims: Sequence[Mapping[str, Any]], node: Mapping[str, Any], slices: Sequence[Mapping[str, Any]],
             classes: Mapping[str, Mapping[str, Any]], allocated: set[DeviceID],
             cache: SelectorCache | None = None) -> list[dict[str, Any]] | None:
    """One ``AllocationResult`` per claim, or ``None`` when they do not fit on ``node``.

    Raises :class:`AllocationError` for a claim or class that cannot be allocated anywhere.
    """
    pools = gather_pools(slices, node)
    search = _Search(claims, node, pools, classes, allocated, cache or SelectorCache())
    search.prepare()
    if not search.run():
        return None
    results = []
    for ci, claim in enumerate(claims):
        picked = search.picked[ci]
        chosen = {ri: a for (c, ri), a in search.chosen.items() if c == ci}
        allocation: dict[str, Any] = {"devices": {"results": [
            {"request": req.name, "driver": cand.id.driver, "pool": cand.id.pool, "device": cand.id.device}
            for req, cand in picked]}}
        config = _config(claim, search.requests[ci], chosen)
        if config:
            allocation["devices"]["config"] = config
        selector = _node_selector(picked)
        if selector:
            allocation["nodeSelector"] = selector
        results.append(allocation)
    return results

