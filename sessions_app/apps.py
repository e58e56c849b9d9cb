from django.apps import AppConfig


class SessionsAppConfig(AppConfig):
    """Layer 1: every conversation persisted, searchable and resumable."""

    name = "sessions_app"
    verbose_name = "Sessions"
