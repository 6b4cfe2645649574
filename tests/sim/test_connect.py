"""The pods' connect subresources on the REST side: options, validation, container choice (pure)."""

import pytest
from multidict import MultiDict

from gpuspawner.sim import connect
from gpuspawner.sim.errors import ApiError

POD = {"metadata": {"name": "nb"}, "spec": {"initContainers": [{"name": "init"}],
                                            "containers": [{"name": "a"}, {"name": "b"}]}}


@pytest.mark.parametrize("container,result", [
    ("a", "a"), ("init", "init"),
    (None, "a container name must be specified for pod nb, choose one of: [a b] or one of the init containers: [init]"),
    ("zz", "container zz is not valid for pod nb"),
])
def test_pick_container(container, result):
    if result in ("a", "init"):
        assert connect.pick_container(POD, container) == result
    else:
        with pytest.raises(ApiError) as e:
            connect.pick_container(POD, container)
        assert (e.value.code, e.value.message) == (400, result)
    assert connect.pick_container({"metadata": {"name": "x"}, "spec": {"containers": [{"name": "only"}]}}, None) == "only"


@pytest.mark.parametrize("query,code,message", [
    ({"tailLines": "-1"}, 422, 'PodLogOptions "nb" is invalid: tailLines: Invalid value: -1: '
                               "must be greater than or equal to 0"),
    ({"limitBytes": "0"}, 422, 'PodLogOptions "nb" is invalid: limitBytes: Invalid value: 0: must be greater than 0'),
    ({"sinceSeconds": "0"}, 422, 'PodLogOptions "nb" is invalid: sinceSeconds: Invalid value: 0: '
                                 "must be greater than 0"),
    ({"sinceSeconds": "5", "sinceTime": "2024-01-01T00:00:00Z"}, 422,
     'PodLogOptions "nb" is invalid: : Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified'),
    ({"tailLines": "x"}, 400, 'strconv.ParseInt: parsing "x": invalid syntax'),
    ({"follow": "yes"}, 400, 'strconv.ParseBool: parsing "yes": invalid syntax'),
    ({"sinceTime": "yesterday"}, 400, 'parsing time "yesterday" as "2006-01-02T15:04:05Z07:00": '
                                      'cannot parse "yesterday" as "2006"'),
])
def test_bad_log_options(query, code, message):
    with pytest.raises(ApiError) as e:
        connect.log_options(query, "nb")
    assert (e.value.code, e.value.message) == (code, message)


def test_log_options():
    container, opts = connect.log_options({"container": "a", "follow": "true", "tailLines": "5", "timestamps": "1",
                                           "sinceTime": "2024-01-01T00:00:01.5+01:00"}, "nb")
    assert container == "a"
    assert opts == {"follow": True, "previous": False, "timestamps": True, "tail_lines": 5, "limit_bytes": None,
                    "since_ns": 1704067201_500_000_000 - 3600 * 10**9}


def test_exec_options_default_stdout_and_stderr():
    q = MultiDict([("command", "sh"), ("command", "-c"), ("command", "echo hi"), ("stdout", "false"),
                   ("stdin", "true"), ("tty", "true")])
    assert connect.exec_options(q) == (None, ["sh", "-c", "echo hi"],
                                       {"stdin": True, "stdout": True, "stderr": True, "tty": True})
