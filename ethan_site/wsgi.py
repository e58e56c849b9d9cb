"""WSGI entry point: `gunicorn ethan_site.wsgi:application`."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ethan_site.settings")

application = get_wsgi_application()
