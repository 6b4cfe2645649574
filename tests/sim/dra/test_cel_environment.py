"""DRA's CEL environment: the expressions of Kubernetes' own DRA CEL tests, evaluated by cel-python
with the Kubernetes extensions (expectations from dynamic-resource-allocation/cel/compile_test.go)."""

import pytest

from gpuspawner.sim.dra import cel_environment, semver

ATTRS = {"bool": {"bool": True}, "int": {"int": 1}, "string": {"string": "fish"}, "version": {"version": "1.0.0"},
         "services": {"string": "some_example_value"}, "sym": {"string": "asymetric"},
         "other.example.com/name": {"bool": True}}
DEVICE = cel_environment.device_variable("dra.example.com", {"attributes": ATTRS, "capacity": {"quantity": {"value": "1Mi"}}})
D = 'device.attributes["dra.example.com"]'

MATCHES = [
    ("true", True),
    ("false", False),
    ('"no-such-domain" in device.attributes', False),
    ('"dra.example.com" in device.attributes', True),
    ('device.driver == "dra.example.com"', True),
    (f"{D}.bool", True),
    (f'{D}["bool"]', True),
    ('device.attributes["other.example.com"].name', True),
    (f"{D}.int > 0", True),
    (f'{D}.string == "fish"', True),
    ('cel.bind(dra, device.attributes["dra.example.com"], dra.bool && dra.int == 1)', True),
    (f'{D}.version.isGreaterThan(semver("0.0.1"))', True),
    (f'{D}.version.isGreaterThan(semver("v0.0.1", true)) && isSemver("v1.0.0", true)', True),
    (f'{D}.version.compareTo(semver("1.0.0")) == 0', True),
    (f'{D}.version.compareTo(semver("12.4.0")) >= 0', False),
    (f'{D}.version.isLessThan(semver("1.0.1"))', True),
    ('semver("1.2.3").major() == 1 && semver("1.2.3").minor() == 2 && semver("1.2.3").patch() == 3', True),
    ('semver("1.0.0-alpha").isLessThan(semver("1.0.0"))', True),
    ('semver("1.0.0") == semver("1.0.0+build.5")', True),
    ('device.capacity["dra.example.com"].quantity.isGreaterThan(quantity("1Ki"))', True),
    ('device.capacity["dra.example.com"].quantity.compareTo(quantity("1Mi")) == 0', True),
    ('device.capacity["dra.example.com"].quantity.isLessThan(quantity("1M"))', False),
    ('quantity("1Gi") == quantity("1024Mi")', True),
    ('!("name" in device.capacity["dra.example.com"]) || device.capacity["dra.example.com"].name.isGreaterThan(quantity("1"))',
     True),
    ('device.attributes.exists_one(x, x == "dra.example.com")', True),
    (f'{D}.exists_one(x, x == "services")', True),
    (f'{D}.services.split("example").size() >= 2', True),
    (f'{D}.sym.matches("[^a]?sym")', True),
    (f'{D}.string.upperAscii() == "FISH"', True),
    ('has(device.attributes["no-such-domain"].foo)', False),
]


@pytest.mark.parametrize("expression,expected", MATCHES, ids=[m[0][:60] for m in MATCHES])
def test_selector_matches_as_kubernetes_does(expression, expected):
    assert cel_environment.compile_expression(expression).matches(DEVICE) is expected


RUNTIME_ERRORS = [
    ('device.attributes["no-such-domain"].noSuchAttr.isGreaterThan(quantity("0"))', "no such key: noSuchAttr"),
    ('device.attributes["no-such-domain"]["noSuchAttr"].isGreaterThan(quantity("0"))', "no such key: noSuchAttr"),
    (f'{D}.version == "1.0.0"', "no such overload"),
    (f'{D}.version.isGreaterThan(quantity("1"))', "no such overload"),
    ('semver("1.2") == semver("1.2.0")', "No Major.Minor.Patch elements found"),
    ('quantity("1 Gi").sign() == 1', "quantities must match"),
    (f"{D}.string", "CEL result of type string could not be converted to bool"),
]


@pytest.mark.parametrize("expression,message", RUNTIME_ERRORS, ids=[e[0][:60] for e in RUNTIME_ERRORS])
def test_runtime_errors_use_cel_go_words(expression, message):
    with pytest.raises(cel_environment.CelRuntimeError, match=message):
        cel_environment.compile_expression(expression).matches(DEVICE)


COMPILE_ERRORS = [
    ("?!", "Syntax error"),
    ("1", "must evaluate to bool or the unknown type, not int"),
    ("'x'", "must evaluate to bool or the unknown type, not string"),
    ("nosuch(1)", "undeclared reference to 'nosuch'"),
    ("device.driver.frobnicate()", "undeclared reference to 'frobnicate'"),
    ("pod.name == 'x'", "undeclared reference to 'pod'"),
]


@pytest.mark.parametrize("expression,message", COMPILE_ERRORS, ids=[e[0] for e in COMPILE_ERRORS])
def test_compile_errors(expression, message):
    with pytest.raises(cel_environment.CelCompileError, match=message):
        cel_environment.compile_expression(expression)


def test_version_attribute_that_is_not_semver_is_a_runtime_error():
    with pytest.raises(cel_environment.CelRuntimeError, match="attribute v: parse semantic version"):
        cel_environment.device_variable("d.example.com", {"attributes": {"v": {"version": "12.8"}}})


@pytest.mark.parametrize("text,version", [
    ("1.2.3", (1, 2, 3, ())), ("0.1.0-alpha.1", (0, 1, 0, ("alpha", "1"))), ("12.8.0+cuda", (12, 8, 0, ())),
])
def test_semver_parse(text, version):
    v = semver.parse(text)
    assert (v.major, v.minor, v.patch, v.pre) == version


@pytest.mark.parametrize("text", ["1.2", "01.2.3", "1.2.3-", "v1.2.3", "1.2.x"])
def test_semver_rejects_what_blang_rejects(text):
    with pytest.raises(semver.SemverError):
        semver.parse(text)


def test_semver_precedence():
    order = ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta.2", "1.0.0-beta.11", "1.0.0-rc.1",
             "1.0.0", "2.0.0"]
    parsed = [semver.parse(v) for v in order]
    assert sorted(reversed(parsed)) == parsed


def test_tolerant_semver_normalizes():
    assert semver.normalize("v12.4") == "12.4.0"
    assert cel_environment.compile_expression('semver("v12.4", true) == semver("12.4.0")').matches(DEVICE) is True
