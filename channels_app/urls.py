"""The web doors' turns: POST /api/chat and the OpenAI-compatible /v1 (included by
ethan_site.urls), each an async view whose turn is answered on the event loop
(channels_app.web.TurnDoor)."""

from django.urls import path

from channels_app.openai.apis import ChatCompletionsApi, ModelApi, ModelsApi
from channels_app.rest import ChatApi

api = [path("chat", ChatApi.as_view(), name="api-chat")]

v1 = [
    path("chat/completions", ChatCompletionsApi.as_view(), name="v1-chat-completions"),
    path("models", ModelsApi.as_view(), name="v1-models"),
    path("models/<path:name>", ModelApi.as_view(), name="v1-model"),
]
