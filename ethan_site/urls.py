from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from channels_app import urls as doors
from channels_app.home_page import home
from channels_app.lark.webhook import lark_webhook
from ethan_site.health import healthz
from profile_app.views import ProfilePage

urlpatterns = [
    path("", home, name="home"),
    path("admin/", admin.site.urls),
    # Sign-in ("login") among them: its throttle is every sign-in form's (ethan_site.signin).
    path("accounts/", include("django.contrib.auth.urls")),
    path("profile/", ProfilePage.as_view(), name="profile"),
    path("memory/", include("channels_app.memory_page.urls")),
    # The turn's doors (channels_app/): POST /api/chat, and /v1 below.
    path("api/", include(doors.api)),
    path("api/", include("agent_app.urls")),
    path("api/", include("sessions_app.urls")),
    path("api/", include("memory_app.urls")),
    path("api/", include("profile_app.urls")),
    path("api/", include("episodes_app.urls")),
    # The OpenAI-compatible endpoint, for chat apps: base URL http://host:8000/v1.
    path("v1/", include(doors.v1)),
    path("api/schema", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("lark/webhook", lark_webhook, name="lark-webhook"),
    path("healthz", healthz, name="healthz"),
    # Ethan as an OAuth authorization server for MCP hosts (oauth_app): /.well-known/… at the
    # origin, the rest under /oauth/.
    path("", include("oauth_app.urls")),
]
