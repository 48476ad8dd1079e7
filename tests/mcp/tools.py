"""One script that calls every tool through a connected MCP client, shared by HTTP and stdio."""

from __future__ import annotations

from typing import Any

from mcp import Client

PROJECT = "/home/dev/shop"

TOOLS = {
    "write_memory",
    "read_memory",
    "list_memories",
    "delete_memory",
    "smart_resume",
    "search_memory",
    "get_context",
}


def structured(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    data: dict[str, Any] = result.structured_content
    return data


async def exercise_every_tool(client: Client) -> None:
    listed = await client.list_tools()
    assert {tool.name for tool in listed.tools} == TOOLS
    for tool in listed.tools:
        assert tool.description
        assert len(tool.description) > 80

    write = structured(
        await client.call_tool(
            "write_memory",
            {
                "key": "current.task",
                "value": "auth refactoring with jwt rotation",
                "project_path": PROJECT,
                "tags": ["auth"],
                "created_by": "claude",
            },
        )
    )
    assert write["created"] is True
    assert write["memory"]["version"] == 1
    structured(
        await client.call_tool(
            "write_memory",
            {"key": "project.framework", "value": "Next.js", "project_path": PROJECT},
        )
    )

    read = structured(
        await client.call_tool("read_memory", {"key": "current.task", "project_path": PROJECT})
    )
    assert read["memory"]["value"] == "auth refactoring with jwt rotation"
    assert read["memory"]["accessCount"] == 1
    missing = structured(
        await client.call_tool("read_memory", {"key": "current.none", "project_path": PROJECT})
    )
    assert missing["memory"] is None
    pattern = structured(
        await client.call_tool("read_memory", {"key": "*.task", "project_path": PROJECT})
    )
    assert [m["key"] for m in pattern["memories"]] == ["current.task"]

    listed_memories = structured(
        await client.call_tool(
            "list_memories", {"project_path": PROJECT, "tags": ["auth"], "limit": 10}
        )
    )
    assert [m["key"] for m in listed_memories["memories"]] == ["current.task"]

    resume = structured(
        await client.call_tool("smart_resume", {"project_path": PROJECT, "budget": 200})
    )
    assert resume["briefing"].startswith("Working on Next.js project.")
    assert resume["tokenCount"] <= 200

    found = structured(
        await client.call_tool(
            "search_memory", {"query": "jwt rotation", "project_path": PROJECT, "sources": ["kv"]}
        )
    )
    assert found["results"][0]["source"] == "kv"
    assert found["results"][0]["content"].startswith("current.task: auth refactoring")
    # A global memory, which a read for the project sees, is found by the project's search too.
    structured(
        await client.call_tool(
            "write_memory",
            {"key": "ai.style", "value": "rotation notes stay terse", "scope": "global"},
        )
    )
    found = structured(
        await client.call_tool(
            "search_memory", {"query": "rotation", "project_path": PROJECT, "sources": ["kv"]}
        )
    )
    assert "ai.style: rotation notes stay terse" in {hit["content"] for hit in found["results"]}

    context = structured(
        await client.call_tool(
            "get_context", {"project_path": PROJECT, "prompt": "jwt rotation", "budget": 500}
        )
    )
    assert context["tokenCount"] <= 500
    assert "jwt rotation" in context["context"]

    stale_delete = await client.call_tool(
        "delete_memory", {"key": "current.task", "project_path": PROJECT, "if_version": 7}
    )
    assert stale_delete.is_error
    assert "VersionConflict" in stale_delete.content[0].text
    deleted = structured(
        await client.call_tool("delete_memory", {"key": "current.task", "project_path": PROJECT})
    )
    assert deleted == {"deleted": True}

    # A bad call is a tool error the model can read, not a crash.
    conflict = await client.call_tool(
        "write_memory",
        {"key": "project.framework", "value": "Remix", "project_path": PROJECT, "if_version": 7},
    )
    assert conflict.is_error
    assert "VersionConflict" in conflict.content[0].text
    no_project = await client.call_tool(
        "write_memory", {"key": "x", "value": 1, "scope": "session"}
    )
    assert no_project.is_error
    assert "sessionId" in no_project.content[0].text
