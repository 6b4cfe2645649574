"""The JupyterHub REST API calls the culler makes, with its service token.
Design notes: docs/culling.md.
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import quote

__all__ = ["HubClient", "HubError"]

PAGINATION = "application/jupyterhub-pagination+json"


class HubError(Exception):
    """A hub API call failed; the message says which and why."""


class HubClient:
    def __init__(self, api_url: str, token: str, *, timeout: float = 60.0, page_size: int = 0):
        self.api_url = api_url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.page_size = page_size
        self._session = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def _request(self, method: str, url: str, **kw: Any) -> tuple[int, Any]:
        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession(headers={"Authorization": f"token {self.token}"})
        try:
            async with self._session.request(method, url, timeout=aiohttp.ClientTimeout(total=self.timeout),
                                             **kw) as r:
                body = await r.read()
                status = r.status
        except (aiohttp.ClientError, asyncio.TimeoutError) as e:
            raise HubError(f"{method} {url}: cannot reach the hub: {e or type(e).__name__}") from None
        if status in (401, 403):
            raise HubError(f"{method} {url}: HTTP {status} {body[:200].decode('utf-8', 'replace')}: the token "
                           "lacks a scope (see docs/culling.md for the service's role)")
        return status, body

    async def ready_users(self) -> list[dict[str, Any]]:
        """Every user with a ready server, all pages."""
        import json

        params = {"state": "ready"}
        if self.page_size:
            params["limit"] = str(self.page_size)
        url: str | None = f"{self.api_url}/users"
        users: list[dict[str, Any]] = []
        while url:
            status, body = await self._request("GET", url, params=params, headers={"Accept": PAGINATION})
            if status != 200:
                raise HubError(f"GET {url}: HTTP {status} {body[:200].decode('utf-8', 'replace')}")
            try:
                doc = json.loads(body)
            except (ValueError, RecursionError):
                raise HubError(f"GET {url}: the answer is not JSON") from None
            if isinstance(doc, list):  # a hub without pagination
                return [u for u in doc if isinstance(u, dict)]
            items = doc.get("items") if isinstance(doc, dict) else None
            if not isinstance(items, list):
                raise HubError(f"GET {url}: the answer is neither a list of users nor a page of them")
            users += [u for u in items if isinstance(u, dict)]
            page = doc.get("_pagination")
            nxt = page.get("next") if isinstance(page, dict) else None
            url, params = (nxt.get("url"), {}) if isinstance(nxt, dict) and nxt.get("url") else (None, {})
        return users

    async def gpu_usage(self, user: str) -> dict[str, Any] | None:
        """The user's GPU-hours and running GPU servers (None: no such user, or an answer that is not JSON)."""
        import json

        url = f"{self.api_url}/users/{quote(user, safe='')}/gpu-usage"
        status, body = await self._request("GET", url)
        if status == 404:
            return None
        if status != 200:
            raise HubError(f"GET {url}: HTTP {status} {body[:200].decode('utf-8', 'replace')}")
        try:
            doc = json.loads(body)
        except ValueError:
            return None
        return doc if isinstance(doc, dict) else None

    def server_url(self, user: str, server: str) -> str:
        base = f"{self.api_url}/users/{quote(user, safe='')}"
        return f"{base}/servers/{quote(server, safe='')}" if server else f"{base}/server"

    async def stop(self, user: str, server: str) -> int:
        """Stop a server; returns the hub's status (204 stopped, 202 stopping, 404 already gone)."""
        url = self.server_url(user, server)
        status, body = await self._request("DELETE", url)
        if status not in (202, 204, 404):
            raise HubError(f"DELETE {url}: HTTP {status} {body[:200].decode('utf-8', 'replace')}")
        return status
