"""MCPServer resources: the operator connects to each, lists its tools and keeps status."""
