from django.urls import path

from profile_app.apis import ProfileApi, ProfileSectionApi

urlpatterns = [
    path("profile", ProfileApi.as_view(), name="api-profile"),
    path("profile/sections/<str:key>", ProfileSectionApi.as_view(), name="api-profile-section"),
]
