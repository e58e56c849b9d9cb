"""What a connection may do with a person's memory. Ethan's own API tokens may do everything."""

from __future__ import annotations

READ = "memory.read"
WRITE = "memory.write"
# Every scope, in the order the consent page and the challenges name them.
ALL = (READ, WRITE)
# The MCP tools that change the memory: a connection without WRITE is refused them.
WRITE_TOOLS = frozenset({"memory_write", "procedure_write", "profile_update", "fact_forget"})


def granted(scopes: list[str] | tuple[str, ...] | set[str], needed: str) -> bool:
    """Whether `scopes` allow `needed`; writing implies reading (the MCP specification asks a
    server to honour scope hierarchies)."""
    return needed in scopes or (needed == READ and WRITE in scopes)
