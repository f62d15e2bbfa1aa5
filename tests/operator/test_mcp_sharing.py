"""Which MCPServers a run gets: its namespace's, plus those the admin shares with it in the
scope policy (`mcpServers`, matched like scope grants); a name is never offered twice."""

from __future__ import annotations

from lestrade.operator.tenancy.scopes import parse_policy
from lestrade.operator.tools.mcp import McpHub, McpToolInfo, ServerConfig
from lestrade.resources.tenancy import Requester

POLICY = """
grants:
  - fromNamespaces: [team-a]
    namespaces: [team-a-db]
mcpServers:
  - servers: [platform/grafana]
    fromNamespaces: [team-a]
  - servers: ["tools/*"]
    groups: [sre]
  - servers: [platform/pagerduty]
    groups: [sre]
    fromNamespaces: [team-b]
"""


def _hub(*keys: str) -> McpHub:
    hub = McpHub()
    for key in keys:
        namespace, name = key.split("/")
        entry = hub.entry(namespace, name)
        entry.config = ServerConfig(f"http://{name}.{namespace}:8000/mcp")
        entry.tools = [McpToolInfo("query", f"{name}__query", "Query.", {"type": "object"}, True, False, "Unattended")]
    return hub


def _offered(hub: McpHub, namespace: str, requester: Requester | None) -> list[str]:
    shared = parse_policy(POLICY).shared_mcp(namespace, requester)
    return [e.key for e in hub.servers_for(namespace, shared)]


def test_own_namespace_and_shared_servers_only() -> None:
    hub = _hub(
        "team-a/grafana", "team-a/logs", "platform/grafana", "platform/pagerduty", "tools/time", "team-c/secret-stuff"
    )
    nobody = None
    sre = Requester(username="ann", groups=["sre"])
    # The run's own server named grafana wins over the shared one of that name.
    assert _offered(hub, "team-a", nobody) == ["team-a/grafana", "team-a/logs"]
    assert _offered(hub, "team-b", nobody) == []
    assert _offered(hub, "team-b", sre) == ["platform/pagerduty", "tools/time"]
    assert _offered(hub, "team-x", sre) == ["tools/time"]  # both conditions needed for pagerduty
    # Reading a namespace (a scope grant) does not give its MCP servers.
    assert "team-c/secret-stuff" not in _offered(hub, "team-a", sre)


async def test_shared_server_reaches_the_model_once_per_name() -> None:
    hub = _hub("platform/grafana")
    shared = parse_policy(POLICY).shared_mcp("team-a", None)
    tools = [t for ts in hub.toolsets(hub.servers_for("team-a", shared)) for t in ts.tools]
    assert [t.name for t in tools] == ["grafana__query"]
    assert tools[0].description.startswith("[MCP server platform/grafana]")
    # A server deleted mid-run: its tools say so instead of calling anything.
    hub.remove("platform", "grafana")
    out = await tools[0].run({})
    assert out.status == "error" and "no longer available" in out.text()


def test_a_bad_mcp_grant_grants_nothing_and_says_why() -> None:
    policy = parse_policy("mcpServers: [{servers: [grafana], fromNamespaces: [team-a]}]")
    assert policy.mcp_grants == () and policy.grants == ()
    assert "mcpServers[0].servers" in (policy.error or "")
