from django.urls import path

from agent_app.apis import ContextApi, SearchApi

urlpatterns = [
    path("context", ContextApi.as_view(), name="api-context"),
    path("search", SearchApi.as_view(), name="api-search"),
]
