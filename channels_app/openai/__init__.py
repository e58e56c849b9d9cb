"""The OpenAI-compatible endpoint (/v1/chat/completions, /v1/models): apis.py answers, names.py
says what each model name means, conversations.py maps a chat app's conversation to a session."""
