"""Conversations from other assistants' exports (ChatGPT, Claude) as sessions: docs/import.md.

Each source has its reader (chatgpt.py, claude.py) that turns one conversation of the export's
conversations.json into a plain Conversation (export.py); export.py streams the file, a zip or
the JSON itself, one conversation at a time, so a large export is never held in memory;
services.py writes them, one transaction per conversation, idempotent by the conversation's id
in its source. Learning from them is agent_app's (agent_app.history_import): it crosses the
layers.
"""
