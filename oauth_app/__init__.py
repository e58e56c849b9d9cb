"""Ethan as an OAuth authorization server for remote MCP hosts (docs/mcp.md): metadata, client
metadata documents, dynamic registration, consent, and the connections a person can see and
end. Built on django-oauth-toolkit's models and views."""
