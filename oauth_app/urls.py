"""The authorization server's routes, mounted at the site's root (ethan_site/urls.py): the
.well-known documents must sit at the origin (RFC 8414 §3, RFC 9728 §3), the rest under
/oauth/. The namespace is django-oauth-toolkit's own, as its metadata view names the endpoints
by it."""

from django.urls import path
from oauth2_provider import views as dot

from oauth_app import views

app_name = "oauth2_provider"

urlpatterns = [
    path(
        ".well-known/oauth-authorization-server",
        dot.OAuthServerMetadataView.as_view(),
        name="oauth-server-metadata",
    ),
    path(
        ".well-known/oauth-protected-resource",
        views.ProtectedResourceView.as_view(),
        name="oauth-resource-metadata",
    ),
    path(
        ".well-known/oauth-protected-resource/<path:resource_path>",
        views.ProtectedResourceView.as_view(),
        name="oauth-resource-metadata-path",
    ),
    path("oauth/authorize/", views.ConsentView.as_view(), name="authorize"),
    path("oauth/token/", views.JsonTokenView.as_view(), name="token"),
    path("oauth/revoke/", dot.RevokeTokenView.as_view(), name="revoke-token"),
    path("oauth/register/", views.ClientRegistrationView.as_view(), name="dcr-register"),
    path(
        "oauth/register/<str:client_id>/",
        views.ClientManagementView.as_view(),
        name="dcr-register-management",
    ),
]
