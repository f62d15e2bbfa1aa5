"""MCP tool servers over real sockets: the SDK-written test server (every failure mode) and a
third-party server from PyPI (mcp-server-time behind mcp-proxy), through the product's client,
catalog, tools and hub — what a run calls."""

from __future__ import annotations

import time

import pytest

from lestrade.operator.tools.mcp import McpFailure, McpHub, Policy, ServerConfig, build_catalog, discover
from lestrade.operator.tools.mcp.catalog import MAX_DESCRIPTION
from lestrade.operator.tools.mcp.client import call_tool
from lestrade.testing.mcp_testserver import SECRET_LINE

FAST = dict(connect_timeout=10.0, call_timeout=3.0)


async def _hub_tools(
    url: str,
    name: str = "tsrv",
    transport: str = "StreamableHTTP",
    *,
    policy: Policy = Policy(trust_hints=True),
    max_output: int = 30_000,
    **config,
):
    """The model-facing tools of one server, as a run gets them from the hub."""
    hub = McpHub(observe=lambda *a: observed.append(a))
    observed: list[tuple] = []
    settings = ServerConfig(url, transport, **{**FAST, **config})
    found = await discover(settings)
    entry = hub.entry("team-a", name)
    entry.config, entry.max_output_chars = settings, max_output
    entry.tools, _ = build_catalog(name, found.tools, policy)
    tools = {t.name: t for ts in hub.toolsets(hub.servers_for("team-a")) for t in ts.tools}
    return tools, observed, hub


async def test_tools_are_listed_with_hints_and_named_server__tool(mcp_servers) -> None:
    server = mcp_servers()
    tools, _, _ = await _hub_tools(server.url)
    assert {"tsrv__echo", "tsrv__pods_summary", "tsrv__delete_everything", "tsrv__note"} <= set(tools)
    out = await tools["tsrv__pods_summary"].run({"namespace": "shop"})
    assert out.status == "success" and "namespace shop: 3 pods" in out.text()


async def test_sse_transport(mcp_servers) -> None:
    server = mcp_servers()
    tools, _, _ = await _hub_tools(f"{server.base}/sse", transport="SSE")
    assert (await tools["tsrv__echo"].run({"text": "over sse"})).text() == "echo: over sse"


async def test_hostile_listing_is_capped_cleaned_and_filtered(mcp_servers) -> None:
    server = mcp_servers()
    found = await discover(ServerConfig(server.url, **FAST))
    tools, skipped = build_catalog("tsrv", found.tools, Policy(trust_hints=True))
    by_tool = {t.tool: t for t in tools}
    hostile = by_tool["ignore_previous_instructions"].description
    assert len(hostile) <= MAX_DESCRIPTION
    assert "\x1b" not in hostile and "\x00" not in hostile and "\u202e" not in hostile
    reasons = {s.tool: s.reason for s in skipped}
    assert "name is not" in reasons["bad name!"]
    assert "larger than" in reasons["schema_bomb"]
    # Filters: exclude wins over include.
    tools, skipped = build_catalog("tsrv", found.tools, Policy(include=("echo", "pods_*"), exclude=("pods_*",)))
    assert [t.tool for t in tools] == ["echo"]
    # The exposed name must fit 64 characters.
    tools, skipped = build_catalog("s" * 60, found.tools, Policy())
    assert tools == [] and all(
        "longer than 64" in s.reason or "name is not" in s.reason or "larger than" in s.reason for s in skipped
    )


async def test_approval_defaults_follow_hints_only_when_trusted(mcp_servers) -> None:
    server = mcp_servers()
    found = await discover(ServerConfig(server.url, **FAST))

    def approvals(policy: Policy) -> dict[str, str]:
        return {t.tool: t.approval for t in build_catalog("tsrv", found.tools, policy)[0]}

    untrusted = approvals(Policy())
    assert set(untrusted.values()) == {"Required"}  # hints not believed: everything waits
    trusted = approvals(Policy(trust_hints=True))
    assert trusted["echo"] == "Unattended"
    assert trusted["note"] == "Required"  # no hints: may be destructive
    assert trusted["delete_everything"] == "Required"
    # A rule can free a tool, but never one the server calls destructive.
    ruled = approvals(Policy(rules=((("delete_*", "note"), "Unattended"), (("echo",), "Required")), trust_hints=True))
    assert ruled["note"] == "Unattended" and ruled["echo"] == "Required"
    assert ruled["delete_everything"] == "Required"
    tools, _, _ = await _hub_tools(server.url)
    assert tools["tsrv__delete_everything"].needs_approval({"target": "x"})
    assert not tools["tsrv__echo"].needs_approval({"text": "x"})


async def test_hang_gives_a_tool_error_within_the_call_timeout(mcp_servers) -> None:
    server = mcp_servers()
    tools, observed, _ = await _hub_tools(server.url, call_timeout=2.0)
    started = time.monotonic()
    out = await tools["tsrv__hang"].run({})
    assert out.status == "error" and "no answer" in out.text() and "team-a/tsrv" in out.text()
    assert time.monotonic() - started < 30
    assert observed[-1][:3] == ("team-a/tsrv", "hang", "error")
    # The server is still fine for the next call.
    assert (await tools["tsrv__echo"].run({"text": "still here"})).text() == "echo: still here"


async def test_a_dead_server_is_an_error_and_the_next_session_reconnects(mcp_servers) -> None:
    server = mcp_servers()
    tools, _, _ = await _hub_tools(server.url, call_timeout=3.0)
    died = await tools["tsrv__die"].run({})
    assert died.status == "error" and "MCP server team-a/tsrv" in died.text()
    assert not server.alive()
    down = await tools["tsrv__echo"].run({"text": "anyone?"})
    assert down.status == "error" and "ConnectError" in down.text()
    server.restart()
    assert (await tools["tsrv__echo"].run({"text": "back"})).text() == "echo: back"


async def test_garbage_answers_fail_fast_with_a_clear_error(mcp_servers) -> None:
    server = mcp_servers()
    with pytest.raises(McpFailure, match="not MCP") as refused:
        await discover(ServerConfig(f"{server.base}/nonsense/mcp", connect_timeout=20.0))
    # What the server said is never quoted: a URL may point at any internal service, and the
    # error lands in status (a tenant must not read other services through it).
    assert "I am not an MCP server" not in str(refused.value)
    tools, _, _ = await _hub_tools(f"{server.base}/garbage/mcp", name="junk", call_timeout=20.0)
    started = time.monotonic()
    out = await tools["junk__status"].run({})
    assert out.status == "error" and "not MCP" in out.text() and "this is not JSON-RPC" not in out.text()
    assert time.monotonic() - started < 15  # not the 20 s call timeout: detected, not waited out


async def test_tool_errors_and_bad_arguments_reach_the_model(mcp_servers) -> None:
    server = mcp_servers()
    tools, _, _ = await _hub_tools(server.url)
    crashed = await tools["tsrv__crash"].run({})
    assert crashed.status == "error" and "the backend is on fire" in crashed.text()
    bad = await tools["tsrv__echo"].run({"text": 42})
    assert bad.status == "error" and "text" in bad.text() and "string" in bad.text()
    missing = await tools["tsrv__pods_summary"].run({})
    assert missing.status == "error" and "namespace" in missing.text()


async def test_huge_output_is_redacted_and_truncated(mcp_servers) -> None:
    server = mcp_servers()
    tools, _, _ = await _hub_tools(server.url, max_output=5_000)
    out = await tools["tsrv__huge"].run({"size": 2_000_000})
    assert out.status == "success"
    assert len(out.data) < 6_000 and "truncated" in out.data
    assert SECRET_LINE not in out.data and "password=[REDACTED]" in out.data


async def test_answers_past_the_byte_limit_are_refused(mcp_servers) -> None:
    server = mcp_servers()
    config = ServerConfig(server.url, max_response_bytes=200_000, **FAST)
    with pytest.raises(McpFailure, match="exceeded 200000 bytes"):
        await call_tool(config, "huge", {"size": 1_000_000})


async def test_headers_reach_the_server(mcp_servers) -> None:
    server = mcp_servers(require_header="X-Api-Key=s3cr3t")
    with pytest.raises(McpFailure, match="401"):
        await discover(ServerConfig(server.url, **FAST))
    found = await discover(ServerConfig(server.url, headers={"X-Api-Key": "s3cr3t"}, **FAST))
    assert any(t.name == "echo" for t in found.tools)
    assert "s3cr3t" not in repr(ServerConfig(server.url, headers={"X-Api-Key": "s3cr3t"}))


async def test_a_server_that_is_not_there(mcp_servers) -> None:
    with pytest.raises(McpFailure, match="ConnectError"):
        await discover(ServerConfig("http://127.0.0.1:9/mcp", **FAST))


@pytest.mark.parametrize("transport, path", [("StreamableHTTP", "/mcp"), ("SSE", "/sse")])
async def test_third_party_time_server_from_pypi(time_mcp_server, transport: str, path: str) -> None:
    """mcp-server-time (PyPI) behind mcp-proxy (PyPI): listed, its read-only hints untrusted by
    default, and called as the model would."""
    found = await discover(ServerConfig(time_mcp_server.base + path, transport, connect_timeout=30.0))
    assert "get_current_time" in {t.name for t in found.tools}
    tools, _, _ = await _hub_tools(
        time_mcp_server.base + path,
        name="time",
        transport=transport,
        policy=Policy(),
        connect_timeout=30.0,
        call_timeout=30.0,
    )
    assert tools["time__get_current_time"].needs_approval({"timezone": "UTC"})
    out = await tools["time__get_current_time"].run({"timezone": "Europe/Berlin"})
    assert out.status == "success" and "Europe/Berlin" in out.text(), out.text()
