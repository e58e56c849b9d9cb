from django.apps import AppConfig


class EpisodesAppConfig(AppConfig):
    """Layer 4: a summary and keywords per finished session."""

    name = "episodes_app"
    verbose_name = "Episodes"
