from django.urls import path

from agent_app.openai_api.apis import ChatCompletionsApi, ModelApi, ModelsApi

urlpatterns = [
    path("chat/completions", ChatCompletionsApi.as_view(), name="v1-chat-completions"),
    path("models", ModelsApi.as_view(), name="v1-models"),
    path("models/<path:name>", ModelApi.as_view(), name="v1-model"),
]
