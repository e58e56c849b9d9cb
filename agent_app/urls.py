from django.urls import path

from agent_app.apis import ChatApi, ContextApi, SearchApi

urlpatterns = [
    path("chat", ChatApi.as_view(), name="api-chat"),
    path("context", ContextApi.as_view(), name="api-context"),
    path("search", SearchApi.as_view(), name="api-search"),
]
