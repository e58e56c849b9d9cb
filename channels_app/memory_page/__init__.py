"""我的记忆 (/memory/): the page where a person sees, and decides, everything Ethan remembers
about them. Server-rendered Django templates and forms over the same services the REST API and
the agent's tools call; docs/memory-page.md describes it."""
