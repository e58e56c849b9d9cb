"""Ethan's memory for MCP hosts (Claude Desktop, Claude Code, Cursor…): server.py, run by the
ethan_mcp command over stdio or streamable HTTP. docs/mcp.md has the hosts' configuration."""
