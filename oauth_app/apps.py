from django.apps import AppConfig


class OAuthAppConfig(AppConfig):
    name = "oauth_app"
    verbose_name = "Connected apps (OAuth)"
