"""The Celery app. Every setting lives in settings.py's Celery block (CELERY_* names)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ethan_site.settings")

app = Celery("ethan")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
