"""litellm's completion() reaches for `mcp` (which litellm does not declare) when tools are passed.

With tools, completion() loads litellm's MCP gateway handler, which probes for and imports the
`mcp` package. The pinned `mcp` must be importable alongside the pinned litellm, and a real
completion with tools must round-trip; this fails if either pin drifts into a broken pair.
"""

from __future__ import annotations

import importlib.metadata
import json
import sys

import litellm

from lestrade.modelserver import ScriptedModelServer

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "kubectl_describe",
            "description": "Describe a resource",
            "parameters": {"type": "object", "properties": {"kind": {"type": "string"}}},
        },
    }
]


def test_pinned_mcp_works_with_litellm_completion(model_server: ScriptedModelServer, scenario_name: str) -> None:
    import mcp
    import mcp.types

    assert importlib.metadata.version("mcp") and mcp.types.Tool
    model_server.add_scenario(
        {"name": scenario_name, "steps": [{"tool_calls": [{"name": "kubectl_describe", "arguments": {"kind": "pod"}}]}]}
    )
    response = litellm.completion(
        messages=[{"role": "user", "content": "describe"}],
        tools=TOOLS,
        **model_server.litellm_params(scenario_name),
    )
    [call] = response.choices[0].message.tool_calls
    assert call.function.name == "kubectl_describe" and json.loads(call.function.arguments) == {"kind": "pod"}
    # completion() with tools went through litellm's MCP gateway check, which probes for mcp
    assert "litellm.responses.mcp.litellm_proxy_mcp_handler" in sys.modules
    from litellm.proxy._experimental.mcp_server.utils import is_mcp_available

    assert is_mcp_available()
    assert model_server.requests(scenario_name)[0]["tools"] == TOOLS


def test_litellm_mcp_tool_conversion_works_with_pinned_mcp() -> None:
    """litellm's MCP helpers read `Tool.inputSchema`, which mcp 2 renamed: the pin keeps mcp 1.x."""
    import mcp.types
    from litellm.experimental_mcp_client.tools import transform_mcp_tool_to_openai_tool

    tool = mcp.types.Tool(name="kubectl_get", description="list", inputSchema={"type": "object", "properties": {}})
    converted = transform_mcp_tool_to_openai_tool(tool)
    assert converted["function"]["name"] == "kubectl_get"
    assert converted["function"]["parameters"]["type"] == "object"
