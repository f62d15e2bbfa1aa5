"""The web console: static pages and the small JSON/SSE API they use."""
