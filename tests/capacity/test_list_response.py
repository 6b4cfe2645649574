"""Reading a list response item by item (gpuspawner.capacity.list_response): the same values as
json.loads, the same refusals, whatever the spacing and the order of the top-level fields."""

import json
import random

import pytest

from gpuspawner.capacity.list_response import ITEM, iter_list


def split(body):
    """(items, other top-level fields) as iter_list yields them."""
    out = list(iter_list(body))
    return [v for k, v in out if k is ITEM], {k: v for k, v in out if k is not ITEM}


POD = {"metadata": {"name": "p", "namespace": "ns", "labels": {"items": "]"}},
       "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}


@pytest.mark.parametrize("body", [
    '{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"7","continue":"eyJ2Ijo"},"items":[]}',
    json.dumps({"items": [POD, POD], "metadata": {"resourceVersion": "9"}, "kind": "PodList"}),  # items first
    json.dumps({"kind": "NodeList", "items": [POD]}, indent=2),  # spaces and newlines
    '{}',
    '{"items":null,"metadata":{}}',  # what the API server never sends, read as json.loads reads it
    '{"items":[1,"]",{"items":[2]},[[]],null,true,-1.5e3,"\\u00e9"]}',  # nested "items", strings with brackets
], ids=["empty-list", "items-first", "indented", "empty-object", "null-items", "odd-values"])
def test_same_values_as_json_loads(body):
    doc = json.loads(body)
    items, other = split(body.encode())
    expected_items = doc["items"] if isinstance(doc.get("items"), list) else []
    assert items == expected_items
    assert other == {k: v for k, v in doc.items() if not (k == "items" and isinstance(v, list))}


def test_generated_list_pages_read_as_json_loads_reads_them():
    rng = random.Random(7)
    for _ in range(200):
        items = [{"metadata": {"name": f"p{i}", "labels": {rng.choice("ab"): rng.choice(["x", "]", "}", ","])}},
                  "n": rng.random(), "l": [rng.randint(-9, 9) for _ in range(rng.randint(0, 3))]}
                 for i in range(rng.randint(0, 30))]
        fields = [("kind", "PodList"), ("apiVersion", "v1"), ("metadata", {"resourceVersion": str(rng.randint(1, 99))}),
                  ("items", items)]
        rng.shuffle(fields)
        body = json.dumps(dict(fields), indent=rng.choice([None, 1, 4]), separators=rng.choice([None, (",", ":")]))
        got_items, other = split(body)
        assert got_items == items
        assert other == {k: v for k, v in fields if k != "items"}


@pytest.mark.parametrize("body", ['', '{"a":1', '{"a":1} x', '{"items":[1,]}', '{"items":[1 2]}', '{1:2}',
                                  '{"a" 1}', '{"items":[{"a":1}'])
def test_what_json_loads_refuses_is_refused(body):
    with pytest.raises(json.JSONDecodeError):
        json.loads(body)
    with pytest.raises(json.JSONDecodeError):
        list(iter_list(body))


@pytest.mark.parametrize("body", ['[1]', 'null', '"items"'])
def test_json_that_is_not_an_object_is_no_list_response(body):
    with pytest.raises(json.JSONDecodeError, match="Expecting '{'"):
        list(iter_list(body))
