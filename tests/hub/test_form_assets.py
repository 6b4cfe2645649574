"""The spawn form's script and style, served by the hub (gpuspawner.hub.form_assets): a page names
them under a version of their content, the hub serves exactly those files, cacheable, to anyone."""

from __future__ import annotations

import hashlib
import re

import pytest
from tornado.httpclient import AsyncHTTPClient, HTTPClientError

from gpuspawner.hub import form_assets
from gpuspawner.shared import shared_dir
from tests.builders import FakeCache
from tests.hub.test_handlers import load_snippet
from tests.hub.test_spawner import A100, LAST, make_spawner


def test_a_url_names_the_file_under_the_hubs_prefix_and_its_contents_version():
    digest = hashlib.sha256((shared_dir("static") / "gpuspawner-live.js").read_bytes()).hexdigest()[:16]
    assert form_assets.asset_url("/hub/", "gpuspawner-live.js") == f"/hub/gpuspawner/static/gpuspawner-live.js?v={digest}"
    assert form_assets.asset_url("/jh/hub/", "gpuspawner-live.js").startswith("/jh/hub/gpuspawner/static/")
    with pytest.raises(KeyError):
        form_assets.asset_url("/hub/", "secrets.txt")


async def test_the_form_names_its_files_instead_of_carrying_them(no_kube_client, install_cache):
    install_cache(FakeCache(A100, LAST))
    s = make_spawner()
    s.hub.base_url = "/jh/hub/"
    form = await s.get_options_form()
    srcs = re.findall(r'<script[^>]* src="([^"]+)"', form)
    assert srcs == [form_assets.asset_url("/jh/hub/", "gpuspawner-form.js"),
                    form_assets.asset_url("/jh/hub/", "gpuspawner-live.js")]
    assert f'<link rel="stylesheet" href="{form_assets.asset_url("/jh/hub/", "gpuspawner-form.css")}">' in form
    assert "<style" not in form
    # the only inline script is the live refresh's data
    inline = re.findall(r"<script(?![^>]* src=)[^>]*>", form)
    assert inline == ['<script type="application/json" id="gs-live-profiles">']
    assert len(form.encode()) < 8_000  # it was 27 KB with the files inline


@pytest.fixture
async def hub_url(mock_hub):
    served = await mock_hub(load_snippet())
    return served.hub_url


@pytest.mark.parametrize("name, kind", [("gpuspawner-live.js", "javascript"), ("gpuspawner-form.js", "javascript"),
                                        ("gpuspawner-form.css", "text/css")])
async def test_the_hub_serves_each_file_cacheable_without_sign_in(hub_url, name, kind):
    url = hub_url + form_assets.asset_url("/hub/", name)[len("/hub/"):]
    r = await AsyncHTTPClient().fetch(url, request_timeout=30)
    assert r.body == (shared_dir("static") / name).read_bytes()
    assert kind in r.headers["Content-Type"]
    assert "max-age=315360000" in r.headers["Cache-Control"]  # versioned: kept until the version changes
    assert r.headers["X-Content-Type-Options"] == "nosniff"
    again = await AsyncHTTPClient().fetch(url, headers={"If-None-Match": r.headers["Etag"]}, request_timeout=30,
                                          raise_error=False)
    assert again.code == 304


@pytest.mark.parametrize("path", ["nothing.js", "../templates/form.html", "%2e%2e/templates/form.html",
                                  "..%2fshared.py", ""])
async def test_nothing_else_is_served(hub_url, path):
    with pytest.raises(HTTPClientError) as e:
        await AsyncHTTPClient().fetch(hub_url + "gpuspawner/static/" + path, request_timeout=30)
    assert e.value.code in (403, 404)
