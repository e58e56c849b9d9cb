from django.apps import AppConfig


class EthanSiteConfig(AppConfig):
    """Project-wide wiring: the embedded task runner and the periodic task declarations."""

    name = "ethan_site"
    verbose_name = "Ethan"

    def ready(self) -> None:
        from django.conf import settings
        from django.core.signals import request_finished
        from django.db.models.signals import post_migrate

        from ethan_shared import queue
        from ethan_site import checks, schedule  # noqa: F401 (checks registers)
        from ethan_site.access_log import access_logs_without_queries

        access_logs_without_queries()

        # Embedded mode runs deferred tasks once the response has been sent.
        request_finished.connect(queue.on_request_finished, dispatch_uid="ethan_run_deferred")
        post_migrate.connect(schedule.on_post_migrate, dispatch_uid="ethan_schedule")

        import ethan_llm

        # ethan_llm is plain Python: it gets Django's resolved settings once, here.
        ethan_llm.configure(
            env=settings.ETHAN_MODEL_API_ENV,
            model=settings.ETHAN_MODEL,
            timeout=settings.ETHAN_MODEL_TIMEOUT,
            retries=settings.ETHAN_MODEL_RETRIES,
            compression_model=settings.ETHAN_COMPRESSION_MODEL,
            compression_routes=settings.ETHAN_COMPRESSION_ROUTES,
        )
        import embedder

        embedder.configure(embedder=settings.ETHAN_EMBEDDER)
