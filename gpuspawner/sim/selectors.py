"""Label and field selectors, parsed and matched the way kube-apiserver does.
Design notes: docs/simulated-apiserver.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

__all__ = [
    "SelectorError",
    "LabelSelector",
    "FieldSelector",
    "parse_label_selector",
    "parse_field_selector",
    "validate_label_value",
    "validate_qualified_name",
]


class SelectorError(ValueError):
    """A selector the real API server would refuse with 400 BadRequest."""


# --- label validation (k8s.io/apimachinery/pkg/util/validation/validation.go) ---

_QUALIFIED_NAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_QUALIFIED_NAME_RE = re.compile(f"^{_QUALIFIED_NAME_FMT}$")
_LABEL_VALUE_FMT = f"({_QUALIFIED_NAME_FMT})?"
_LABEL_VALUE_RE = re.compile(f"^{_LABEL_VALUE_FMT}$")
_DNS1123_SUBDOMAIN_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_DNS1123_SUBDOMAIN_RE = re.compile(f"^{_DNS1123_SUBDOMAIN_FMT}$")


def validate_qualified_name(value: str) -> list[str]:
    """``IsQualifiedName``: an optional DNS-subdomain prefix, ``/``, a name part.

    Returns the real error strings (empty when valid).
    """
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            if len(prefix) > 253:
                errs.append("prefix part must be no more than 253 bytes")
            if not _DNS1123_SUBDOMAIN_RE.match(prefix):
                errs.append(
                    "prefix part a lowercase RFC 1123 subdomain must consist of lower case "
                    "alphanumeric characters, '-' or '.', and must start and end with an "
                    "alphanumeric character (e.g. 'example.com', regex used for validation is "
                    f"'{_DNS1123_SUBDOMAIN_FMT}')"
                )
    else:
        return [
            "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and "
            "must start and end with an alphanumeric character (e.g. 'MyName',  or "
            "'my.name',  or '123-abc', regex used for validation is "
            f"'{_QUALIFIED_NAME_FMT}') with an optional DNS subdomain prefix and '/' "
            "(e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part must be no more than 63 bytes")
    if name and not _QUALIFIED_NAME_RE.match(name):
        errs.append(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must "
            "start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  "
            f"or '123-abc', regex used for validation is '{_QUALIFIED_NAME_FMT}')"
        )
    return errs


def validate_label_value(value: str) -> list[str]:
    """``IsValidLabelValue``; returns the real error strings (empty when valid)."""
    errs: list[str] = []
    if len(value) > 63:
        errs.append("must be no more than 63 bytes")
    if not _LABEL_VALUE_RE.match(value):
        errs.append(
            "a valid label must be an empty string or consist of alphanumeric characters, "
            "'-', '_' or '.', and must start and end with an alphanumeric character (e.g. "
            "'MyValue',  or 'my_value',  or '12345', regex used for validation is "
            f"'{_LABEL_VALUE_FMT}')"
        )
    return errs


def _go_quote(value: str) -> str:
    """Go's ``%q`` for the plain strings that appear in error messages."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


# --- label selectors ---------------------------------------------------------

# Token kinds, as in selector.go's ``Token`` enum.
_ERR, _EOS, _CPAR, _COMMA, _NOT, _DEQ, _EQ, _GT, _ID, _IN, _LT, _NEQ, _NOTIN, _OPAR = range(14)
_STRING2TOKEN = {
    ")": _CPAR,
    ",": _COMMA,
    "!": _NOT,
    "==": _DEQ,
    "=": _EQ,
    ">": _GT,
    "in": _IN,
    "<": _LT,
    "!=": _NEQ,
    "notin": _NOTIN,
    "(": _OPAR,
}
_SPECIAL = set("=!(),><")
_WHITESPACE = set(" \t\r\n")
_BINARY_OPERATORS = "in, notin, =, ==, !=, gt, lt"


def _lex(s: str) -> list[tuple[int, str]]:
    items: list[tuple[int, str]] = []
    pos, n = 0, len(s)
    while True:
        while pos < n and s[pos] in _WHITESPACE:
            pos += 1
        if pos >= n:
            items.append((_EOS, ""))
            return items
        if s[pos] in _SPECIAL:
            # Longest special-symbol token (``!=`` before ``!``), as scanSpecialSymbol.
            buf, last = "", None
            while pos < n and s[pos] in _SPECIAL:
                buf += s[pos]
                tok = _STRING2TOKEN.get(buf)
                if tok is not None:
                    last = (tok, buf)
                elif last is not None:
                    buf = buf[:-1]
                    break
                pos += 1
            if last is None:
                items.append((_ERR, f"error expected: keyword found '{buf}'"))
            else:
                items.append(last)
            continue
        start = pos
        while pos < n and s[pos] not in _SPECIAL and s[pos] not in _WHITESPACE:
            pos += 1
        word = s[start:pos]
        items.append((_STRING2TOKEN.get(word, _ID), word))


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    op: str  # "=", "==", "!=", "in", "notin", "exists", "!", "gt", "lt"
    values: tuple[str, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        has = self.key in labels
        if self.op in ("=", "==", "in"):
            return has and labels[self.key] in self.values
        if self.op in ("!=", "notin"):
            return not has or labels[self.key] not in self.values
        if self.op == "exists":
            return has
        if self.op == "!":
            return not has
        # gt / lt: integer comparison; a non-integer label never matches.
        if not has:
            return False
        try:
            have, want = int(labels[self.key]), int(self.values[0])
        except ValueError:
            return False
        return have > want if self.op == "gt" else have < want


class _LabelParser:
    """A transcription of selector.go's ``Parser`` (same states, same messages)."""

    def __init__(self, text: str) -> None:
        self.items = _lex(text)
        self.pos = 0

    def _look(self, values_ctx: bool) -> tuple[int, str]:
        tok, lit = self.items[self.pos]
        if values_ctx and tok in (_IN, _NOTIN):
            tok = _ID
        return tok, lit

    def _take(self, values_ctx: bool) -> tuple[int, str]:
        tok, lit = self._look(values_ctx)
        self.pos += 1
        return tok, lit

    def parse(self) -> list[Requirement]:
        reqs: list[Requirement] = []
        while True:
            tok, lit = self._look(True)
            if tok in (_ID, _NOT):
                try:
                    reqs.append(self._requirement())
                except SelectorError as e:
                    raise SelectorError(f"unable to parse requirement: {e}") from None
                t, lit2 = self._take(True)
                if t == _EOS:
                    return reqs
                if t == _COMMA:
                    t2, l2 = self._look(True)
                    if t2 not in (_ID, _NOT):
                        raise SelectorError(f"found '{l2}', expected: identifier after ','")
                    continue
                raise SelectorError(f"found '{lit2}', expected: ',' or 'end of string'")
            if tok == _EOS:
                return reqs
            raise SelectorError(f"found '{lit}', expected: !, identifier, or 'end of string'")

    def _requirement(self) -> Requirement:
        op = ""
        tok, lit = self._take(True)
        if tok == _NOT:
            op = "!"
            tok, lit = self._take(True)
        if tok != _ID:
            raise SelectorError(f"found '{lit}', expected: identifier")
        key = lit
        errs = validate_qualified_name(key)
        if errs:
            raise SelectorError(f"Invalid value: {_go_quote(key)}: {'; '.join(errs)}")
        nxt, _ = self._look(True)
        if op == "!" or nxt in (_EOS, _COMMA):
            # ``!key`` is complete on its own; whatever follows it is judged by
            # parse() (``!a=b`` -> "found '=', expected: ',' or 'end of string'").
            return Requirement(key, op or "exists", ())
        otok, olit = self._take(False)
        ops = {_IN: "in", _EQ: "=", _DEQ: "==", _GT: "gt", _LT: "lt", _NOTIN: "notin", _NEQ: "!="}
        if otok not in ops:
            raise SelectorError(f"found '{olit}', expected: {_BINARY_OPERATORS}")
        oper = ops[otok]
        if oper in ("in", "notin"):
            values = self._set_values()
        else:
            values = self._exact_value()
        self._validate_values(key, oper, values)
        return Requirement(key, oper, tuple(sorted(values)))

    def _set_values(self) -> set[str]:
        tok, lit = self._take(True)
        if tok != _OPAR:
            raise SelectorError(f"found '{lit}' expected: '('")
        tok, lit = self._look(True)
        if tok in (_ID, _COMMA):
            values = self._identifiers()
            if self._take(True)[0] != _CPAR:
                raise SelectorError(f"found '{lit}', expected: ')'")
            return values
        if tok == _CPAR:
            self._take(True)
            return {""}
        raise SelectorError(f"found '{lit}', expected: ',', ')' or identifier")

    def _identifiers(self) -> set[str]:
        out: set[str] = set()
        while True:
            tok, lit = self._take(True)
            if tok == _ID:
                out.add(lit)
                t2, l2 = self._look(True)
                if t2 == _COMMA:
                    continue
                if t2 == _CPAR:
                    return out
                raise SelectorError(f"found '{l2}', expected: ',' or ')'")
            if tok == _COMMA:
                if not out:
                    out.add("")
                t2, _ = self._look(True)
                if t2 == _CPAR:
                    out.add("")
                    return out
                if t2 == _COMMA:
                    self._take(True)
                    out.add("")
                continue
            raise SelectorError(f"found '{lit}', expected: ',', or identifier")

    def _exact_value(self) -> set[str]:
        tok, _ = self._look(True)
        if tok in (_EOS, _COMMA):
            return {""}
        tok, lit = self._take(True)
        if tok == _ID:
            return {lit}
        raise SelectorError(f"found '{lit}', expected: identifier")

    @staticmethod
    def _validate_values(key: str, op: str, values: set[str]) -> None:
        # NewRequirement: each value must be a valid label value; gt/lt need an integer.
        errs: list[str] = []
        for i, v in enumerate(sorted(values)):
            if op in ("gt", "lt"):
                try:
                    int(v)
                except ValueError:
                    errs.append(
                        f"values[{i}]: Invalid value: {_go_quote(v)}: for 'Gt', 'Lt' "
                        "operators, the value must be an integer"
                    )
            bad = validate_label_value(v)
            if bad:
                errs.append(f"values[{i}][{key}]: Invalid value: {_go_quote(v)}: {'; '.join(bad)}")
        if len(errs) == 1:
            raise SelectorError(errs[0])
        if errs:
            raise SelectorError("[" + ", ".join(errs) + "]")


@dataclass(frozen=True, slots=True)
class LabelSelector:
    requirements: tuple[Requirement, ...]

    @property
    def empty(self) -> bool:
        return not self.requirements

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)


EVERYTHING = LabelSelector(())


def parse_label_selector(text: str | None) -> LabelSelector:
    """Parse ``labelSelector`` as ``labels.Parse``; ``None``/``""`` selects everything."""
    if not text:
        return EVERYTHING
    reqs = _LabelParser(text).parse()
    reqs.sort(key=lambda r: r.key)  # selector.go sorts by key for a deterministic order
    return LabelSelector(tuple(reqs))


# --- field selectors -----------------------------------------------------------


def _dig(obj: Mapping[str, Any], *path: str) -> Any:
    cur: Any = obj
    for p in path:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(p)
    return cur


def _s(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"  # strconv.FormatBool
    return str(value)


def _meta(name: str) -> Callable[[Mapping[str, Any]], str]:
    return lambda o: _s(_dig(o, "metadata", name))


def _at(*path: str) -> Callable[[Mapping[str, Any]], str]:
    return lambda o: _s(_dig(o, *path))


def _pod_ips(o: Mapping[str, Any]) -> str:
    # status.podIPs is accepted by the Pod conversion func; we model its value
    # as the IPs joined by "," (select it with an escaped comma, "\\,").
    # [I] inferred from PodToSelectableFields, not checked against a server.
    ips = _dig(o, "status", "podIPs") or []
    return ",".join(_s(i.get("ip")) for i in ips if isinstance(i, Mapping))


def _event_reporting(o: Mapping[str, Any]) -> str:
    # pkg/registry/core/event/strategy.go: "reportingComponent" selects on
    # event.ReportingController (JSON "reportingComponent" in core/v1).
    return _s(o.get("reportingComponent"))


# Per kind: label -> getter.  ``None`` means the kind has no conversion func
# and falls back to DefaultMetaV1FieldSelectorConversion (name, namespace only).
_FIELDS: dict[str, dict[str, Callable[[Mapping[str, Any]], str]]] = {
    "pods": {
        "metadata.name": _meta("name"),
        "metadata.namespace": _meta("namespace"),
        "spec.nodeName": _at("spec", "nodeName"),
        "spec.restartPolicy": _at("spec", "restartPolicy"),
        "spec.schedulerName": _at("spec", "schedulerName"),
        "spec.serviceAccountName": _at("spec", "serviceAccountName"),
        "spec.hostNetwork": lambda o: _s(bool(_dig(o, "spec", "hostNetwork"))),
        "status.phase": _at("status", "phase"),
        "status.podIP": _at("status", "podIP"),
        "status.podIPs": _pod_ips,
        "status.nominatedNodeName": _at("status", "nominatedNodeName"),
    },
    # Node: metadata.name and spec.unschedulable only (no namespace: cluster-scoped).
    "nodes": {
        "metadata.name": _meta("name"),
        "spec.unschedulable": lambda o: _s(bool(_dig(o, "spec", "unschedulable"))),
    },
    "events": {
        "metadata.name": _meta("name"),
        "metadata.namespace": _meta("namespace"),
        "involvedObject.kind": _at("involvedObject", "kind"),
        "involvedObject.namespace": _at("involvedObject", "namespace"),
        "involvedObject.name": _at("involvedObject", "name"),
        "involvedObject.uid": _at("involvedObject", "uid"),
        "involvedObject.apiVersion": _at("involvedObject", "apiVersion"),
        "involvedObject.resourceVersion": _at("involvedObject", "resourceVersion"),
        "involvedObject.fieldPath": _at("involvedObject", "fieldPath"),
        "reason": _at("reason"),
        # pkg/registry/core/event/strategy.go ToSelectableFields:
        # "source" is source.component.
        "source": _at("source", "component"),
        "reportingComponent": _event_reporting,
        "type": _at("type"),
    },
    "namespaces": {
        "metadata.name": _meta("name"),
        "status.phase": _at("status", "phase"),
    },
    "secrets": {
        "metadata.name": _meta("name"),
        "metadata.namespace": _meta("namespace"),
        "type": _at("type"),
    },
    "services": {
        "metadata.name": _meta("name"),
        "metadata.namespace": _meta("namespace"),
        "spec.clusterIP": _at("spec", "clusterIP"),
        "spec.type": _at("spec", "type"),
    },
    # pkg/registry/resource/resourceslice/strategy.go: what a DRA driver's kubelet plugin selects by
    "resourceslices": {
        "metadata.name": _meta("name"),
        "spec.nodeName": _at("spec", "nodeName"),
        "spec.driver": _at("spec", "driver"),
    },
}
_DEFAULT_FIELDS = {"metadata.name": _meta("name"), "metadata.namespace": _meta("namespace")}
# Backwards-compatible alias the Pod conversion func rewrites (conversion.go).
_ALIASES = {("pods", "spec.host"): "spec.nodeName"}


@dataclass(frozen=True, slots=True)
class FieldTerm:
    field: str
    negate: bool
    value: str
    getter: Callable[[Mapping[str, Any]], str]

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return (self.getter(obj) == self.value) != self.negate


@dataclass(frozen=True, slots=True)
class FieldSelector:
    terms: tuple[FieldTerm, ...]

    @property
    def empty(self) -> bool:
        return not self.terms

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return all(t.matches(obj) for t in self.terms)

    def exact(self, field: str) -> str | None:
        """The value a ``field=value`` term requires (``RequiresExactMatch``)."""
        for t in self.terms:
            if t.field == field and not t.negate:
                return t.value
        return None


NO_FIELDS = FieldSelector(())


def _split_terms(text: str) -> list[str]:
    # fields/selector.go splitTerms: split on unescaped commas.
    terms, cur, i = [], [], 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            cur.append(text[i : i + 2])
            i += 2
            continue
        if ch == ",":
            terms.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
        i += 1
    terms.append("".join(cur))
    return terms


def _split_term(term: str) -> tuple[str, str, str] | None:
    # splitTerm: the first operator from the left; "!=" and "==" before "=".
    i = 0
    while i < len(term):
        if term[i] == "\\":
            i += 2
            continue
        for op in ("!=", "==", "="):
            if term.startswith(op, i):
                return term[:i], op, term[i + len(op) :]
        i += 1
    return None


def _unescape(value: str) -> str:
    # fields.UnescapeValue: "\\", "\,", "\=" are escapes; bare "," or "=" are errors.
    out, i = [], 0
    while i < len(value):
        ch = value[i]
        if ch == "\\":
            if i + 1 >= len(value) or value[i + 1] not in "\\,=":
                raise SelectorError(f"invalid field selector: invalid escape sequence: {value[i:i + 2]}")
            out.append(value[i + 1])
            i += 2
            continue
        if ch in ",=":
            raise SelectorError(f"invalid field selector: unescaped character in value: {ch}")
        out.append(ch)
        i += 1
    return "".join(out)


def parse_field_selector(text: str | None, plural: str) -> FieldSelector:
    """Parse ``fieldSelector`` for ``plural`` (``fields.ParseSelector`` + conversion).

    An unknown field raises the real kind-specific message:
    ``field label not supported: x`` for kinds with a conversion func, else
    ``"x" is not a known field selector: only "metadata.name", "metadata.namespace"``.
    """
    if not text:
        return NO_FIELDS
    table = _FIELDS.get(plural)
    terms: list[FieldTerm] = []
    for part in sorted(_split_terms(text)):
        if part == "":
            continue
        split = _split_term(part)
        if split is None:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{part}'")
        label, op, raw = split
        value = _unescape(raw)
        label = _ALIASES.get((plural, label), label)
        getter = (table or _DEFAULT_FIELDS).get(label)
        if getter is None:
            if table is None:
                raise SelectorError(
                    f'{_go_quote(label)} is not a known field selector: only '
                    '"metadata.name", "metadata.namespace"'
                )
            raise SelectorError(f"field label not supported: {label}")
        terms.append(FieldTerm(label, op == "!=", value, getter))
    return FieldSelector(tuple(terms))
