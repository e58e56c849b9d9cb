"""ASGI entry point, for servers such as uvicorn: `uvicorn ethan_site.asgi:application`."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ethan_site.settings")

application = get_asgi_application()
