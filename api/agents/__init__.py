"""Lestrade for other agents: the MCP server (`/mcp`), the A2A agent, and past findings
(`/api/findings`), all acting as the caller."""
