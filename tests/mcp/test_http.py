"""The MCP server over streamable HTTP at /mcp, through the real `mcp` client and uvicorn."""

from __future__ import annotations

import asyncio

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.mcp.conftest import LiveServer
from tests.mcp.tools import exercise_every_tool


def test_every_tool_over_streamable_http(live_server: LiveServer) -> None:
    async def main() -> None:
        async with Client(f"{live_server.url}/mcp") as client:
            await exercise_every_tool(client)

    asyncio.run(main())


def test_mcp_requires_the_bearer_token_when_set(live_server_with_token: LiveServer) -> None:
    url = f"{live_server_with_token.url}/mcp"
    refused = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert refused.status_code == 401
    assert refused.json()["error"] == "Unauthorized"

    async def main() -> None:
        headers = {"Authorization": f"Bearer {live_server_with_token.token}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30) as http,
            Client(streamable_http_client(url, http_client=http)) as client,
        ):
            listed = await client.list_tools()
            assert "write_memory" in {tool.name for tool in listed.tools}

    asyncio.run(main())


def test_mcp_refuses_foreign_host_headers(live_server: LiveServer) -> None:
    response = httpx.post(
        f"{live_server.url}/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Host": "evil.example", "Accept": "application/json, text/event-stream"},
    )
    assert response.status_code == 421
    cross_site = httpx.post(
        f"{live_server.url}/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Origin": "http://evil.example", "Accept": "application/json, text/event-stream"},
    )
    assert cross_site.status_code == 403


@pytest.mark.parametrize("method", ["PUT", "PATCH"])
def test_mcp_other_methods_are_405(live_server: LiveServer, method: str) -> None:
    assert httpx.request(method, f"{live_server.url}/mcp").status_code == 405
