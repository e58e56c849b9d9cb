from django.apps import AppConfig


class ProfileAppConfig(AppConfig):
    """Layer 3: the narrative user profile in seven sections."""

    name = "profile_app"
    verbose_name = "Profile"
