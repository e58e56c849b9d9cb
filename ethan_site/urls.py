from django.contrib import admin
from django.urls import include, path

from ethan_site.health import healthz
from profile_app.views import ProfilePage

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("profile/", ProfilePage.as_view(), name="profile"),
    path("api/", include("profile_app.urls")),
    path("api/", include("episodes_app.urls")),
    path("healthz", healthz, name="healthz"),
]
