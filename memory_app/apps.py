from django.apps import AppConfig


class MemoryAppConfig(AppConfig):
    """Layer 2 and the cold store: facts, procedures, summaries."""

    name = "memory_app"
    verbose_name = "Working memory"
