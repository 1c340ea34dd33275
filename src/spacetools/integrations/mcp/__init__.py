"""MCP front of the Toolshed: `spacetools serve --mcp` (:mod:`.server`)."""
