from django.urls import path

from episodes_app.apis import EpisodesApi

urlpatterns = [path("episodes", EpisodesApi.as_view(), name="api-episodes")]
