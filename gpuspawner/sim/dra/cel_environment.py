"""CEL for DRA device selectors: cel-python with Kubernetes' CEL extensions on top.
Design notes: docs/simulated-cluster.md.
"""

from __future__ import annotations

import functools
import logging
import re
from decimal import Decimal
from typing import Any, Callable, Iterable, Mapping

import celpy
import celpy.celtypes as ct
import lark
from celpy.evaluation import CELEvalError

from testcluster.node.pod_resources import QuantityError, parse_quantity
from . import semver

__all__ = ["CelCompileError", "CelRuntimeError", "Semver", "Quantity", "Program", "compile_expression",
           "device_variable", "FUNCTIONS"]

# cel-python logs every evaluation step at DEBUG; the simulation's loggers must not pay for that
logging.getLogger("celpy").setLevel(logging.WARNING)
logging.getLogger("Evaluator").setLevel(logging.WARNING)


class CelCompileError(ValueError):
    """The expression does not compile (the API server rejects it, the allocator reports it)."""


class CelRuntimeError(ValueError):
    """Evaluation failed for one device (``CEL runtime error: ...`` in the allocator's words)."""


# ---------------------------------------------------------------------------
# opaque values: Semver and Quantity
# ---------------------------------------------------------------------------

class Semver:
    """``kubernetes.Semver``: equal to another Semver of the same precedence, to nothing else."""

    __slots__ = ("version",)

    def __init__(self, version: semver.Version):
        self.version = version

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Semver):
            return self.version == other.version
        raise TypeError("no such overload")

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash(self.version)

    def __repr__(self) -> str:
        return f"semver({str(self.version)!r})"


class Quantity:
    """``kubernetes.Quantity``: an exact decimal value; equal when ``Cmp`` is 0."""

    __slots__ = ("value", "text")

    def __init__(self, value: Decimal, text: str):
        self.value = value
        self.text = text

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Quantity):
            return self.value == other.value
        raise TypeError("no such overload")

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return f"quantity({self.text!r})"


def _quantity_of(text: Any) -> Quantity:
    if not isinstance(text, str):
        raise TypeError("no such overload")
    try:
        return Quantity(parse_quantity(text), str(text))
    except QuantityError:
        # resource.ParseQuantity's error
        raise ValueError("quantities must match the regular expression "
                         "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'") from None


# ---------------------------------------------------------------------------
# library functions (one Python callable per name; dispatch on the receiver's type)
# ---------------------------------------------------------------------------

def _semver(text: Any, tolerant: Any = False) -> Semver:
    if not isinstance(text, str) or not isinstance(tolerant, (bool, ct.BoolType)):
        raise TypeError("no such overload")
    try:
        return Semver(semver.parse(semver.normalize(text) if tolerant else text))
    except semver.SemverError as e:
        raise ValueError(str(e)) from None


def _is_semver(text: Any, tolerant: Any = False) -> ct.BoolType:
    try:
        _semver(text, tolerant)
    except ValueError:
        return ct.BoolType(False)
    return ct.BoolType(True)


def _is_quantity(text: Any) -> ct.BoolType:
    try:
        _quantity_of(text)
    except ValueError:
        return ct.BoolType(False)
    return ct.BoolType(True)


def _compare(a: Any, b: Any) -> int:
    if isinstance(a, Semver) and isinstance(b, Semver):
        return a.version.compare(b.version)
    if isinstance(a, Quantity) and isinstance(b, Quantity):
        return (a.value > b.value) - (a.value < b.value)
    raise TypeError("no such overload")


def _semver_part(name: str) -> Callable[[Any], ct.IntType]:
    def part(v: Any) -> ct.IntType:
        if not isinstance(v, Semver):
            raise TypeError("no such overload")
        return ct.IntType(getattr(v.version, name))
    part.__name__ = name
    return part


def _as_quantity(v: Any) -> Quantity:
    if isinstance(v, Quantity):
        return v
    if isinstance(v, int) and not isinstance(v, bool):
        return Quantity(Decimal(int(v)), str(int(v)))
    raise TypeError("no such overload")


def _q_method(fn: Callable[[Quantity], Any]) -> Callable[[Any], Any]:
    def method(v: Any) -> Any:
        if not isinstance(v, Quantity):
            raise TypeError("no such overload")
        return fn(v)
    return method


def _as_integer(q: Quantity) -> ct.IntType:
    if q.value != q.value.to_integral_value() or abs(q.value) >= 2**63:
        raise ValueError(f"cannot convert value to integer: {q.text}")
    return ct.IntType(int(q.value))


def _q_add(a: Any, b: Any) -> Quantity:
    a, b = _as_quantity(a), _as_quantity(b)
    return Quantity(a.value + b.value, str(a.value + b.value))


def _q_sub(a: Any, b: Any) -> Quantity:
    a, b = _as_quantity(a), _as_quantity(b)
    return Quantity(a.value - b.value, str(a.value - b.value))


def _str(v: Any) -> str:
    if not isinstance(v, str):
        raise TypeError("no such overload")
    return v


def _index_of(target: Any, item: Any, start: Any = 0) -> ct.IntType:
    if isinstance(target, list):
        for i, x in enumerate(target):
            if type(x) is type(item) and x == item:
                return ct.IntType(i)
        return ct.IntType(-1)
    s, sub = _str(target), _str(item)
    if not 0 <= int(start) <= len(s):
        raise ValueError(f"index out of range: {start}")
    return ct.IntType(s.find(sub, int(start)))


def _last_index_of(target: Any, item: Any, end: Any = None) -> ct.IntType:
    if isinstance(target, list):
        for i in range(len(target) - 1, -1, -1):
            if type(target[i]) is type(item) and target[i] == item:
                return ct.IntType(i)
        return ct.IntType(-1)
    s, sub = _str(target), _str(item)
    if end is None:
        return ct.IntType(s.rfind(sub))
    return ct.IntType(s.rfind(sub, 0, int(end) + len(sub)))


def _split(s: Any, sep: Any, limit: Any = -1) -> ct.ListType:
    s, sep, n = _str(s), _str(sep), int(limit)
    if n == 0:
        return ct.ListType([])
    parts = s.split(sep, n - 1) if n > 0 else s.split(sep) if sep else list(s)
    return ct.ListType([ct.StringType(p) for p in parts])


def _substring(s: Any, start: Any, end: Any = None) -> ct.StringType:
    s = _str(s)
    a, b = int(start), len(s) if end is None else int(end)
    if not 0 <= a <= b <= len(s):
        raise ValueError(f"index out of range: {a if not 0 <= a <= len(s) else b}")
    return ct.StringType(s[a:b])


def _join(items: Any, sep: Any = "") -> ct.StringType:
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise TypeError("no such overload")
    return ct.StringType(_str(sep).join(items))


def _replace(s: Any, old: Any, new: Any, n: Any = -1) -> ct.StringType:
    return ct.StringType(_str(s).replace(_str(old), _str(new), int(n)))


def _regex_find(s: Any, pattern: Any) -> ct.StringType:
    m = celpy.evaluation.re2.search(_str(pattern), _str(s))
    return ct.StringType(m.group(0) if m else "")


def _regex_find_all(s: Any, pattern: Any, limit: Any = -1) -> ct.ListType:
    found = [m.group(0) for m in celpy.evaluation.re2.finditer(_str(pattern), _str(s))]
    if int(limit) >= 0:
        found = found[:int(limit)]
    return ct.ListType([ct.StringType(f) for f in found])


def _is_sorted(items: Any) -> ct.BoolType:
    if not isinstance(items, list):
        raise TypeError("no such overload")
    return ct.BoolType(all(items[i] <= items[i + 1] for i in range(len(items) - 1)))


def _sum(items: Any) -> Any:
    if not isinstance(items, list):
        raise TypeError("no such overload")
    total: Any = ct.IntType(0)
    for i, x in enumerate(items):
        total = x if i == 0 else total + x
    return total


def _char_at(s: Any, i: Any) -> ct.StringType:
    s, n = _str(s), int(i)
    if not 0 <= n <= len(s):
        raise ValueError(f"index out of range: {n}")
    return ct.StringType(s[n:n + 1])


FUNCTIONS: dict[str, Callable[..., Any]] = {
    # k8s.io/apiserver/pkg/cel/library/semverlib.go
    "semver": _semver,
    "isSemver": _is_semver,
    "major": _semver_part("major"),
    "minor": _semver_part("minor"),
    "patch": _semver_part("patch"),
    # semver and quantity comparisons (semverlib.go, quantity.go)
    "isGreaterThan": lambda a, b: ct.BoolType(_compare(a, b) == 1),
    "isLessThan": lambda a, b: ct.BoolType(_compare(a, b) == -1),
    "compareTo": lambda a, b: ct.IntType(_compare(a, b)),
    # k8s.io/apiserver/pkg/cel/library/quantity.go
    "quantity": _quantity_of,
    "isQuantity": _is_quantity,
    "sign": _q_method(lambda q: ct.IntType((q.value > 0) - (q.value < 0))),
    "isInteger": _q_method(lambda q: ct.BoolType(q.value == q.value.to_integral_value())),
    "asInteger": _q_method(_as_integer),
    "asApproximateFloat": _q_method(lambda q: ct.DoubleType(float(q.value))),
    "add": _q_add,
    "sub": _q_sub,
    # cel-go ext.Strings
    "charAt": _char_at,
    "indexOf": _index_of,
    "lastIndexOf": _last_index_of,
    "lowerAscii": lambda s: ct.StringType(re.sub(r"[A-Z]+", lambda m: m.group(0).lower(), _str(s))),
    "upperAscii": lambda s: ct.StringType(re.sub(r"[a-z]+", lambda m: m.group(0).upper(), _str(s))),
    "replace": _replace,
    "split": _split,
    "substring": _substring,
    "trim": lambda s: ct.StringType(_str(s).strip()),
    "join": _join,
    # k8s.io/apiserver/pkg/cel/library/regex.go, lists.go
    "find": _regex_find,
    "findAll": _regex_find_all,
    "isSorted": _is_sorted,
    "sum": _sum,
}

_MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})
_BUILTINS = frozenset(celpy.evaluation.base_functions) | {"has", "min", "reduce"}
_TYPE_NAMES = frozenset({"int", "uint", "double", "bool", "string", "bytes", "list", "map", "type",
                         "null_type", "duration", "timestamp", "dyn"})


# ---------------------------------------------------------------------------
# compiling: parse, rewrite cel.bind, check names
# ---------------------------------------------------------------------------

_ENV = celpy.Environment()


def _parse(text: str) -> lark.Tree:
    try:
        return _ENV.compile(text)
    except celpy.CELParseError as e:
        where = str(e.args[0]) if e.args else ""
        raise CelCompileError(f"compilation failed: ERROR: <input>: Syntax error: {where.strip()}") from None


def _bind_template() -> lark.Tree:
    # [INIT].map(VAR, BODY)[0]: cel-go's bind macro is a comprehension over nothing whose
    # accumulator is VAR = INIT and whose result is BODY; a one-element map is the same
    tree = _ENV.compile("[0].map(x, 0)[0]")
    return next(tree.find_data("member_index"))


def _ident_name(expr: lark.Tree) -> str | None:
    """The identifier an ``expr`` subtree consists of, if that is all it is."""
    node = expr
    while isinstance(node, lark.Tree) and len(node.children) == 1:
        node = node.children[0]
    if isinstance(node, lark.Token) and node.type == "IDENT":
        return str(node)
    return None


def _rewrite_binds(tree: lark.Tree) -> None:
    for node in list(tree.iter_subtrees()):
        if node.data != "member_dot_arg" or len(node.children) != 3:
            continue
        target, method, args = node.children
        if str(method) != "bind" or _ident_name(target) != "cel":
            continue
        exprs = [c for c in args.children if isinstance(c, lark.Tree)]
        if len(exprs) != 3 or _ident_name(exprs[0]) is None:
            raise CelCompileError("compilation failed: ERROR: <input>: cel.bind() variable name must be a simple "
                                  "identifier")
        new = _bind_template()
        call = next(new.find_data("member_dot_arg"))
        next(call.find_data("list_lit")).children[0].children = [exprs[1]]
        call.children[2].children = [exprs[0], exprs[2]]
        node.data, node.children = new.data, new.children


def _check_names(tree: lark.Tree) -> None:
    """The names a type checker would reject as undeclared (functions, variables)."""
    bound = {"device"}
    for node in tree.find_data("member_dot_arg"):
        if str(node.children[1]) in _MACROS and len(node.children) == 3:
            first = next((c for c in node.children[2].children if isinstance(c, lark.Tree)), None)
            name = _ident_name(first) if first is not None else None
            if name:
                bound.add(name)
    for node in tree.iter_subtrees():
        if node.data == "ident_arg":
            name = str(node.children[0])
            if name not in FUNCTIONS and name not in _BUILTINS:
                raise CelCompileError(f"compilation failed: ERROR: <input>: undeclared reference to '{name}'")
        elif node.data == "member_dot_arg":
            name = str(node.children[1])
            if name not in FUNCTIONS and name not in _BUILTINS and name not in _MACROS:
                raise CelCompileError(f"compilation failed: ERROR: <input>: undeclared reference to '{name}'")
        elif node.data == "ident":
            name = str(node.children[0])
            if name not in bound and name not in _TYPE_NAMES:
                raise CelCompileError(f"compilation failed: ERROR: <input>: undeclared reference to '{name}'")


_LITERAL_TYPES = (("'", "string"), ('"', "string"), ("b'", "bytes"), ('b"', "bytes"), ("r'", "string"),
                  ('r"', "string"))


def _check_result_type(tree: lark.Tree) -> None:
    """A bare literal that is not a bool (``1``, ``'x'``, ``[...]``) is not a selector."""
    node: Any = tree
    while isinstance(node, lark.Tree) and len(node.children) == 1 and node.data not in ("list_lit", "map_lit"):
        node = node.children[0]
    kind = None
    if isinstance(node, lark.Tree) and node.data == "member_dot" and str(node.children[1]) == "driver" \
            and _ident_name(node.children[0]) == "device":
        kind = "string"  # device.driver is declared a string
    elif isinstance(node, lark.Tree) and node.data in ("list_lit", "map_lit"):
        kind = "list(int)" if node.data == "list_lit" else "map(int, int)"
    elif isinstance(node, lark.Token) and node.type != "IDENT":
        text = str(node)
        if text in ("true", "false"):
            return
        kind = next((t for p, t in _LITERAL_TYPES if text.startswith(p)), None)
        if kind is None:
            kind = "null" if text == "null" else "uint" if text.endswith(("u", "U")) else \
                "double" if any(c in text for c in ".eE") and not text.startswith("0x") else "int"
    if kind:
        raise CelCompileError(f"must evaluate to bool or the unknown type, not {kind}")


class Program:
    """A compiled selector; :meth:`matches` evaluates it for one device variable."""

    def __init__(self, expression: str, tree: lark.Tree):
        self.expression = expression
        self._runner = _ENV.program(tree, functions=FUNCTIONS)

    def matches(self, device: Mapping[str, Any]) -> bool:
        """True/False, or :class:`CelRuntimeError` with cel-go's wording where it differs."""
        try:
            result = self._runner.evaluate({"device": device})
        except CELEvalError as e:
            raise CelRuntimeError(_runtime_message(e)) from None
        except (TypeError, ValueError, KeyError, ArithmeticError) as e:
            raise CelRuntimeError(str(e) or type(e).__name__) from None
        if isinstance(result, CELEvalError):
            raise CelRuntimeError(_runtime_message(result))
        if not isinstance(result, (bool, ct.BoolType)):
            raise CelRuntimeError(f"CEL result of type {_type_name(result)} could not be converted to bool")
        return bool(result)


def _type_name(value: Any) -> str:
    names = {ct.IntType: "int", ct.UintType: "uint", ct.DoubleType: "double", ct.StringType: "string",
             ct.BytesType: "bytes", ct.ListType: "list", ct.MapType: "map", Semver: "kubernetes.Semver",
             Quantity: "kubernetes.Quantity"}
    return next((n for t, n in names.items() if isinstance(value, t)), type(value).__name__)


def _runtime_message(err: CELEvalError) -> str:
    """cel-go's message for the common runtime errors (cel-python words them differently and
    appends its whole activation to some)."""
    msg = str(err.args[0]) if err.args else "evaluation error"
    m = re.match(r"no such member in mapping: '(.*)'$", msg)
    if m:
        return f"no such key: {m.group(1)}"
    if msg == "no such key":
        key = err.args[2][0] if len(err.args) > 2 and err.args[2] else ""
        return f"no such key: {key}"
    if msg.startswith("found no matching overload") or msg == "no such overload":
        return "no such overload"
    m = re.match(r"undeclared reference to '?([^' ]+)'?", msg)
    if m:
        return f"undeclared reference to '{m.group(1)}'"
    if msg == "return error for overflow" and len(err.args) > 2 and err.args[2]:
        return str(err.args[2][0])
    return msg.split(" (in activation")[0]


@functools.lru_cache(maxsize=1024)
def compile_expression(expression: str) -> Program:
    """Compile (cached by text, as the scheduler's CEL cache does); raises :class:`CelCompileError`."""
    if not isinstance(expression, str) or not expression.strip():
        raise CelCompileError("compilation failed: ERROR: <input>: Syntax error: empty expression")
    tree = _parse(expression)
    _rewrite_binds(tree)
    _check_names(tree)
    _check_result_type(tree)
    return Program(expression, tree)


# ---------------------------------------------------------------------------
# the device variable
# ---------------------------------------------------------------------------

class _DomainMap(ct.MapType):
    """``newStringInterfaceMapWithDefault``: a missing domain reads as an empty map."""

    def __getitem__(self, key: Any) -> Any:
        if not ct.MapType.valid_key_type(key):
            raise TypeError(f"unsupported key type: {type(key)}")
        if dict.__contains__(self, key):
            return dict.__getitem__(self, key)
        return ct.MapType()


def _attribute_value(name: str, value: Any) -> Any:
    if not isinstance(value, Mapping) or len(value) != 1:
        raise CelRuntimeError(f"attribute {name}: unsupported attribute value")
    (kind, v), = value.items()
    if kind == "int" and isinstance(v, int) and not isinstance(v, bool):
        return ct.IntType(v)
    if kind == "bool" and isinstance(v, bool):
        return ct.BoolType(v)
    if kind == "string" and isinstance(v, str):
        return ct.StringType(v)
    if kind == "version" and isinstance(v, str):
        try:
            return Semver(semver.parse(v))
        except semver.SemverError as e:
            raise CelRuntimeError(f"attribute {name}: parse semantic version: {e}") from None
    raise CelRuntimeError(f"attribute {name}: unsupported attribute value")


def _by_domain(items: Iterable[tuple[str, Any]], driver: str) -> _DomainMap:
    out = _DomainMap()
    for name, value in items:
        domain, _, ident = name.rpartition("/")
        inner = dict.get(out, ct.StringType(domain or driver))
        if inner is None:
            inner = ct.MapType()
            dict.__setitem__(out, ct.StringType(domain or driver), inner)
        inner[ct.StringType(ident)] = value
    return out


def device_variable(driver: str, device: Mapping[str, Any]) -> ct.MapType:
    """The ``device`` variable for one ResourceSlice device (``spec.devices[i]``).

    Raises :class:`CelRuntimeError` for an attribute value the API would not hold.
    """
    attrs = [(str(k), _attribute_value(str(k), v)) for k, v in (device.get("attributes") or {}).items()]
    caps = []
    for k, v in (device.get("capacity") or {}).items():
        text = v.get("value") if isinstance(v, Mapping) else None
        try:
            caps.append((str(k), Quantity(parse_quantity(text), str(text))))
        except QuantityError:
            raise CelRuntimeError(f"capacity {k}: not a quantity: {text!r}") from None
    return ct.MapType({
        ct.StringType("driver"): ct.StringType(driver),
        ct.StringType("attributes"): _by_domain(attrs, driver),
        ct.StringType("capacity"): _by_domain(caps, driver),
    })

