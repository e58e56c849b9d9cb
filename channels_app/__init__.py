"""The doors: each a thin adapter from its wire format to one turn (agent_app.turn), above it.

turns.py is how every door runs a turn (the caps, the consumer, one wording for refusals);
web.py answers a web door's turn on the event loop; rest.py is POST /api/chat, openai/ the
OpenAI-compatible /v1, lark/ the Lark bot, console.py the terminal.
"""
